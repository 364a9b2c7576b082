import numpy as np
import pytest
from halluprobe.blocks import (
    A7_CANDIDATES,
    A7_SELECTION,
    A7Block,
    A64Block,
    H64Block,
    L9Block,
    block_from_state,
    parse_feature_set,
)
from halluprobe.records import HEAD_STATS, POOLS


def _records(factory, n, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return [factory(f"r{i}", rng, **kw) for i in range(n)]


def test_parse_feature_set():
    assert parse_feature_set("A7H64") == ("A7", "H64")
    assert parse_feature_set("L9A64") == ("A64", "L9")
    assert parse_feature_set("ALL") == ("A7", "A64", "H64", "L9")
    for bad in ("A8", "A7A7", "", "h64", "A7 H64"):
        with pytest.raises(ValueError, match="feature set"):
            parse_feature_set(bad)


def test_a7_candidates_and_selection():
    assert len(A7_CANDIDATES) == 22 and len(A7_SELECTION) == 7
    assert set(A7_SELECTION) <= set(A7_CANDIDATES)


def test_a7_averages_selected_heads(record_factory):
    recs = _records(record_factory, 3, nl=2, h=4)
    heads = [5, 0, 7]  # flat indices into NL * H = 8
    x = A7Block(heads).transform(recs)
    assert x.shape == (3, 7)
    for j, feat in enumerate(A7_SELECTION):
        stat, pool = feat.split(".")
        s, p = HEAD_STATS.index(stat), POOLS.index(pool)
        ref = [r.head_stats[:, :, s, p].reshape(-1)[heads].mean() for r in recs]
        np.testing.assert_allclose(x[:, j], ref, rtol=1e-6)
    with pytest.raises(ValueError, match="A7"):
        A7Block([])
    with pytest.raises(ValueError, match="A7"):
        A7Block([0], features=("entropy.median",))


@pytest.mark.parametrize("n_train", [5, 40])
def test_projected_blocks_component_count_and_centering(record_factory, n_train):
    recs = _records(record_factory, n_train, nl=2, h=4, dm=6)
    y = np.arange(n_train) % 2
    a64 = A64Block(k=3).fit(recs, y)
    h64 = H64Block().fit(recs, y)
    # components = min(64, n_train - 1, dims): dims are 2*4*3 = 24 and 2*6 = 12
    assert a64.transform(recs).shape == (n_train, min(64, n_train - 1, 24))
    assert h64.transform(recs).shape == (n_train, min(64, n_train - 1, 12))
    np.testing.assert_allclose(a64.transform(recs).mean(0), 0.0, atol=1e-9)
    # projection of the standardised train matrix keeps all variance when no component is dropped
    if n_train > 24:
        z = a64.transform(recs)
        raw = np.stack([r.sink_topk[:, :, :3].reshape(-1) for r in recs]).astype(np.float64)
        zs = (raw - raw.mean(0)) / raw.std(0)
        np.testing.assert_allclose((z**2).sum(), (zs**2).sum(), rtol=1e-8)
    with pytest.raises(ValueError, match="sink count"):
        A64Block(k=11)
    with pytest.raises(ValueError, match="not fitted"):
        A64Block(k=1).transform(recs)


def test_l9_rfe_keeps_informative_statistics(record_factory):
    rng = np.random.default_rng(3)
    recs = _records(record_factory, 200, v=6)
    y = rng.integers(0, 2, 200)
    informative = [(1, 0), (4, 2)]  # (statistic, pooling)
    for r, label in zip(recs, y, strict=True):
        for s, p in informative:
            r.logit_pooled[s, p] = 3.0 * label + rng.normal(scale=0.3)
    block = L9Block(n_features=2).fit(recs, y)
    assert sorted(block.arrays["selected"].tolist()) == sorted(s * 4 + p for s, p in informative)
    assert block.transform(recs).shape == (200, 2)
    assert L9Block().fit(recs, y).transform(recs).shape == (200, 9)


def test_block_state_round_trip(record_factory):
    recs = _records(record_factory, 30)
    y = np.arange(30) % 2
    for block in (A7Block([1, 2]), A64Block(2), H64Block(), L9Block()):
        block.fit(recs, y)
        config, arrays = block.state()
        again = block_from_state(config, arrays)
        np.testing.assert_array_equal(again.transform(recs), block.transform(recs))
    with pytest.raises(ValueError, match="unknown feature block"):
        block_from_state({"name": "X9"}, {})
