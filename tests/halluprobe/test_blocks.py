import numpy as np
import pytest
from flashstats_hf import LOGIT_STAT_NAMES
from halluprobe.blocks._blocks import (
    A7_CANDIDATES,
    A7_SELECTION,
    L9_CANDIDATES,
    L9_SELECTION,
    A7Block,
    A64Block,
    H64Block,
    L9Block,
    parse_feature_set,
)
from halluprobe.blocks._state import block_from_state
from halluprobe.features import HEAD_STATS, POOLS


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


def test_a7_candidates_are_the_papers_22():
    # Section 5.2: five per-token statistics pooled four ways, the BOS sink rate and the log-diagonal
    stats = ("max_weight", "effective_support", "entropy", "lookback_ratio", "prev_weight")
    assert A7_CANDIDATES == tuple(f"{s}.{p}" for s in stats for p in POOLS) + (
        "bos_sink.mean",
        "diag_log.mean",
    )
    assert len(A7_CANDIDATES) == 22 and not any(c.startswith("normalized_entropy") for c in A7_CANDIDATES)
    assert len(A7_SELECTION) == 7 and set(A7_SELECTION) <= set(A7_CANDIDATES)


def test_packaged_selections_say_how_they_were_obtained():
    from importlib import resources

    from halluprobe.blocks import Selection

    for block, n, default in (("A7", 7, A7_SELECTION), ("L9", 9, L9_SELECTION)):
        path = resources.files("halluprobe.blocks").joinpath("selections", f"{block.lower()}.json")
        sel = Selection.load(path, block)
        assert sel.features == default and len(sel.features) == n
        prov = sel.provenance
        for key in ("procedure", "dataset", "split", "proxy", "n_examples", "n_groups", "date", "versions"):
            assert key in prov, key
        assert "PROVISIONAL" not in prov["procedure"]


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


def test_l9_has_224_candidates_and_reads_a_fixed_selection(record_factory):
    # Appendix L.2: 7 statistics (6 scalars + the top-k probability at every rank <= 50), pooled 4 ways
    assert len(L9_CANDIDATES) == 224 and len(set(L9_CANDIDATES)) == 224
    assert {f"top_prob_{r}.{p}" for r in (1, 50) for p in POOLS} <= set(L9_CANDIDATES)
    assert len(L9_SELECTION) == 9 and set(L9_SELECTION) <= set(L9_CANDIDATES)
    recs = _records(record_factory, 6)
    feats = ("top_prob_50.max", "answer_logprob.min", "entropy.std")
    x = L9Block(feats).fit(recs, np.arange(6) % 2).transform(recs)
    for j, f in enumerate(feats):
        s, p = f.rsplit(".", 1)
        ref = [r.logit_pooled[LOGIT_STAT_NAMES.index(s), POOLS.index(p)] for r in recs]
        np.testing.assert_allclose(x[:, j], ref, rtol=1e-6)
    assert L9Block().transform(recs).shape == (6, 9)
    with pytest.raises(ValueError, match="L9_CANDIDATES"):
        L9Block(("top_prob_51.mean",))
    old = _records(record_factory, 2, v=7)  # records extracted with the seven old statistics
    with pytest.raises(ValueError, match="re-extract"):
        L9Block().transform(old)
    with pytest.raises(ValueError, match="retrain"):
        block_from_state({"name": "L9", "n_features": 9}, {"selected": np.arange(9)})


def test_l9_selection_is_frozen_not_refit_per_split(record_factory):
    # the same features whatever the training split: fitting learns nothing
    recs = _records(record_factory, 40)
    a = L9Block().fit(recs[:20], np.arange(20) % 2)
    b = L9Block().fit(recs[20:], (np.arange(20) // 10) % 2)
    assert a.config == b.config == {"features": list(L9_SELECTION)} and not a.arrays and not b.arrays
    np.testing.assert_array_equal(a.transform(recs), b.transform(recs))


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


@pytest.mark.parametrize(
    "block",
    [A7Block([0, 2]), A64Block(k=2, components=3), H64Block(layer=0, components=4), L9Block()],
    ids=lambda b: b.name,
)
def test_blocks_are_clonable_sklearn_transformers(block, record_factory):
    from sklearn.base import clone

    params = block.get_params()
    copy = clone(block)
    assert type(copy) is type(block) and copy.get_params().keys() == params.keys()
    assert copy.config == block.config and copy is not block
    rng = np.random.default_rng(8)
    recs = [record_factory(f"r{i}", rng) for i in range(12)]
    out = clone(block).fit_transform(recs, np.arange(12) % 2)
    assert out.shape[0] == 12 and out.dtype == np.float64


def test_block_set_params_changes_the_config():
    b = A64Block(k=1, components=64).set_params(k=3, components=8)
    assert b.config == {"k": 3, "components": 8}
    assert H64Block().set_params(layer=1).state()[0] == {"name": "H64", "layer": 1, "components": 64}


def test_block_in_a_pipeline_under_cross_val_score(record_factory):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(9)
    y = np.arange(60) % 2
    recs = [record_factory(f"r{i}", rng) for i in range(60)]
    for r, label in zip(recs, y, strict=True):
        r.sink_topk[0, 0, 0] += 3.0 * label  # one sink value carries the label
    pipe = make_pipeline(A64Block(k=1, components=8), LogisticRegression())
    scores = cross_val_score(pipe, recs, y, cv=3, scoring="roc_auc")
    assert scores.shape == (3,) and scores.mean() > 0.9


def _naive_projection(x: np.ndarray, n_comp: int) -> dict[str, np.ndarray]:
    """Reference: column standardisation and an SVD whose largest loading per component is positive."""
    sd = x.std(0)
    mean, scale = x.mean(0), np.where(sd > 1e-12, sd, 1.0)
    z = (x - mean) / scale
    center = z.mean(0)
    _, _, vt = np.linalg.svd(z - center, full_matrices=False)
    flip = np.sign(vt[np.arange(vt.shape[0]), np.abs(vt).argmax(1)])
    return {"mean": mean, "scale": scale, "center": center, "components": (vt * flip[:, None])[:n_comp]}


@pytest.mark.parametrize("n_train", [2, 9, 40], ids=lambda n: f"N{n}")
def test_projected_block_arrays_match_a_naive_standardiser_and_svd(record_factory, n_train):
    recs = _records(record_factory, n_train, nl=2, h=4, dm=6)
    for rec in recs:  # a constant column: left centred (scale 1), as the naive reference does
        rec.hidden_pooled[0, 0, 0] = 0.25
    block = H64Block().fit(recs, np.arange(n_train) % 2)
    raw = np.stack([r.hidden_pooled[0].reshape(-1) for r in recs]).astype(np.float64)
    want = _naive_projection(raw, min(64, n_train - 1, raw.shape[1]))
    assert set(block.arrays) == set(want)
    for name, ref in want.items():
        np.testing.assert_allclose(block.arrays[name], ref, atol=1e-10, err_msg=name)
    assert block.arrays["scale"][0] == 1.0
