"""The paper's one-off A7/L9 feature selection (Appendix L.1) and its reuse."""

import json

import numpy as np
import pytest
from flashstats_hf import LOGIT_STAT_NAMES
from halluprobe import DegenerateFitWarning
from halluprobe.blocks import A7_CANDIDATES, L9_CANDIDATES, A7Block, L9Block
from halluprobe.blocks._selection import Selection, cv_auroc, forward_select, select_a7, select_l9
from halluprobe.features import HEAD_STATS, POOLS
from halluprobe.training import train_feature_sets

# tiny synthetic fits: the degenerate-fit warning is expected and tested elsewhere
pytestmark = pytest.mark.filterwarnings("ignore::halluprobe.training._calibration.DegenerateFitWarning")


def _records(factory, n, seed=0):
    rng = np.random.default_rng(seed)
    return [factory(f"r{i}", rng) for i in range(n)]


def _labels_groups(n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, n), [f"g{i // 3}" for i in range(n)]


def _plant_head(recs, y, stat, pool, heads, strength=2.0, seed=2):
    rng = np.random.default_rng(seed)
    s, p = HEAD_STATS.index(stat), POOLS.index(pool)
    for r, label in zip(recs, y, strict=True):
        flat = r.head_stats[:, :, s, p].reshape(-1)
        flat[heads] = strength * label + rng.normal(scale=0.5, size=len(heads))
        r.head_stats[:, :, s, p] = flat.reshape(r.head_stats.shape[:2])


def test_cv_auroc_is_grouped_and_ties_go_to_the_smaller_c():
    rng = np.random.default_rng(0)
    y = np.arange(60) % 2
    x = np.c_[y + rng.normal(scale=0.3, size=60)]
    score, c = cv_auroc(x, y, [f"g{i // 4}" for i in range(60)])
    assert score > 0.95 and c == 0.001  # a one-feature ranking does not depend on C: the smallest wins
    with pytest.raises(ValueError, match="two groups"):
        cv_auroc(x, y, ["g"] * 60)


def test_forward_selection_adds_the_informative_column_first_and_breaks_ties_by_order():
    rng = np.random.default_rng(0)
    y = np.arange(80) % 2
    noise = rng.normal(size=(80, 4))
    x = np.c_[noise[:, 0], y + rng.normal(scale=0.5, size=80), noise[:, 1], noise[:, 2]]
    chosen, path = forward_select(x, ["a", "b", "c", "d"], y, [f"g{i // 4}" for i in range(80)], 2)
    assert chosen[0] == 1 and path[0]["feature"] == "b" and len(path) == 2
    same = np.c_[x[:, 1], x[:, 1]]  # identical columns tie: the first listed wins
    assert forward_select(same, ["p", "q"], y, [f"g{i // 4}" for i in range(80)], 1)[0] == [0]


def test_select_a7_finds_a_planted_previous_token_signal(record_factory):
    recs = _records(record_factory, 90)
    y, groups = _labels_groups(90)
    order = [3, 6, 0, 1, 2, 4, 5, 7]
    _plant_head(recs, y, "prev_weight", "max", order[:2])
    sel = select_a7(recs, y, groups, order, n_features=3, ks=(1, 2, 4))
    assert sel.block == "A7" and len(sel.features) == 3
    assert sel.features[0] == "prev_weight.max"  # a candidate the old list (normalised entropy) lacked
    assert set(sel.features) <= set(A7_CANDIDATES)
    assert sel.provenance["K"] in (1, 2) and len(sel.provenance["path"]) == 3
    x = A7Block(order[: sel.provenance["K"]], sel.features).transform(recs)
    assert x.shape == (90, 3)


def test_select_l9_keeps_planted_rank_probabilities(record_factory):
    recs = _records(record_factory, 120)
    y, groups = _labels_groups(120)
    rng = np.random.default_rng(5)
    planted = ("top_prob_37.mean", "answer_logprob.min")
    for r, label in zip(recs, y, strict=True):
        for f in planted:
            s, p = f.rsplit(".", 1)
            r.logit_pooled[LOGIT_STAT_NAMES.index(s), POOLS.index(p)] = 3.0 * label + rng.normal(scale=0.3)
    sel = select_l9(recs, y, groups, n_features=4, cs=(0.1, 1.0))
    assert sel.block == "L9" and len(sel.features) == 4 and set(planted) <= set(sel.features)
    assert set(sel.features) <= set(L9_CANDIDATES) and set(sel.provenance["per_C"]) == {"0.1", "1.0"}


def test_selection_file_round_trip_and_errors(tmp_path):
    sel = Selection("L9", ("entropy.mean", "top_prob_2.max"), {"procedure": "test"})
    path = sel.save(tmp_path / "sub" / "l9.json")
    again = Selection.load(path, "L9")
    assert again.features == sel.features and again.provenance == {"procedure": "test"}
    with pytest.raises(ValueError, match="expected A7"):
        Selection.load(path, "A7")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block": "L9", "features": ["entropy.median"]}))
    with pytest.raises(ValueError, match="not among the L9 candidates"):
        Selection.load(bad, "L9")
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a selection file"):
        Selection.load(bad)


@pytest.mark.slow  # two selections; the tests above select A7 and L9 and round-trip the file
def test_a_selection_made_once_is_reused_unchanged_on_another_dataset(record_factory):
    # select on dataset A, then train on dataset B: B's L9 and A7 read exactly A's features
    recs_a = _records(record_factory, 60, seed=10)
    y_a, groups_a = _labels_groups(60)
    l9 = select_l9(recs_a, y_a, groups_a, n_features=5, cs=(1.0,))
    a7 = select_a7(recs_a, y_a, groups_a, list(range(8)), n_features=2, ks=(1, 2))
    recs_b = _records(record_factory, 40, seed=20)
    y_b = np.arange(40) % 2
    with pytest.warns(DegenerateFitWarning, match="fewer than 10"):  # 10 validation answers: a tiny fit
        fits = train_feature_sets(
            ["A7L9"], list(range(8)), recs_b[:30], y_b[:30], [f"b{i}" for i in range(30)], recs_b[30:],
            y_b[30:], a7_features=a7.features, l9_features=l9.features,
        )  # fmt: skip
    a7_block, l9_block = fits["A7L9"].blocks
    assert tuple(a7_block.config["features"]) == a7.features
    assert tuple(l9_block.config["features"]) == l9.features
    direct = L9Block(l9.features).transform(recs_b)
    np.testing.assert_array_equal(l9_block.transform(recs_b), direct)
