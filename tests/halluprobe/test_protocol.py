import numpy as np
import pytest
from halluprobe.blocks import A7_SELECTION, A7Block
from halluprobe.features import HEAD_STATS, POOLS
from halluprobe.training import CS, fit_blocks, select_heads, select_sink_count, train_feature_sets

SIGNAL = [(HEAD_STATS.index(f.split(".")[0]), POOLS.index(f.split(".")[1])) for f in A7_SELECTION]


def _problem(factory, n, seed, signal_heads=(0, 1), nl=2, h=4):
    """Records whose A7 features carry the label only on `signal_heads` (flat indices)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    recs = []
    for i in range(n):
        r = factory(f"s{seed}-{i}", rng, nl=nl, h=h)
        flat = r.head_stats.reshape(nl * h, len(HEAD_STATS), 4)
        flat[:] = rng.normal(scale=3.0, size=flat.shape)  # noise heads: large spread
        for hd in signal_heads:
            for s, p in SIGNAL:
                flat[hd, s, p] = 1.0 * y[i] + rng.normal(scale=1.0)
        recs.append(r)
    return recs, y


def test_select_heads_finds_the_signal_heads(record_factory):
    train, y_tr = _problem(record_factory, 200, 0)
    val, y_va = _problem(record_factory, 400, 1)
    order = [1, 0, 2, 3, 4, 5, 6, 7]  # the two signal heads rank first
    k, scores = select_heads(order, train, y_tr, val, y_va, ks=(1, 2, 4, 8))
    assert k == 2, scores
    assert set(scores) == {1, 2, 4, 8}


def test_select_heads_ties_go_to_smaller_k(record_factory):
    train, y_tr = _problem(record_factory, 60, 2, signal_heads=(0, 1, 2, 3, 4, 5, 6, 7))
    for r, label in zip(train, y_tr, strict=True):
        r.head_stats[...] = 10.0 * label  # separable at every K: AUROC 1 everywhere
    k, scores = select_heads(list(range(8)), train, y_tr, train, y_tr, ks=(1, 2, 4))
    assert k == 1 and all(s == 1.0 for s in scores.values())


def test_fit_blocks_ties_to_smallest_c_and_threshold_from_validation(record_factory):
    train, y_tr = _problem(record_factory, 80, 3)
    for r, label in zip(train, y_tr, strict=True):
        r.head_stats[...] = label + 0.01 * r.head_stats
    fit = fit_blocks([A7Block([0])], "A7", train, y_tr, train, y_tr)
    assert fit.C == min(CS) and fit.val_auroc == 1.0
    proba = fit.predict_proba(train)
    assert proba.shape == (len(train), 2)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    p = proba[:, 1]
    np.testing.assert_array_equal(fit.predict(train), (p >= fit.threshold).astype(int))
    # separable validation: the highest-F1 threshold that keeps F1 = 1 is the smallest positive score
    assert fit.threshold == pytest.approx(p[y_tr == 1].min())
    assert np.all(p[y_tr == 0] < fit.threshold)


def test_select_sink_count_grouped_cv(record_factory):
    rng = np.random.default_rng(4)
    n = 120
    y = rng.permutation(np.arange(n) % 2)
    groups = [f"g{i // 3}" for i in range(n)]
    recs = []
    for i in range(n):
        r = record_factory(f"k{i}", rng, nl=2, h=6)
        r.sink_topk[...] = rng.normal(size=r.sink_topk.shape)
        r.sink_topk[0, 0, 2] = 5.0 * y[i]  # only the third sink value of one head is informative
        recs.append(r)
    k, scores = select_sink_count(recs, y, groups, cs=(1.0,))
    assert k == 3, scores
    assert scores[1] < 0.75 and scores[3] == 1.0
    with pytest.raises(ValueError, match="two groups"):
        select_sink_count(recs, y, ["g"] * n)


def test_train_feature_sets_end_to_end(record_factory):
    train, y_tr = _problem(record_factory, 60, 5)
    val, y_va = _problem(record_factory, 40, 6)
    groups = [f"g{i // 2}" for i in range(60)]
    fits = train_feature_sets(["A7", "H64", "A64H64", "A7L9"], list(range(8)), train, y_tr, groups, val, y_va)
    assert set(fits) == {"A7", "H64", "A64H64", "A7L9"}
    assert "K" in fits["A7"].selection and "k" not in fits["A7"].selection
    assert "k" in fits["A64H64"].selection and "K" not in fits["A64H64"].selection
    assert fits["H64"].selection == {}
    assert fits["A7"].val_auroc > 0.7
    d = fits["A64H64"].features(val).shape[1]
    assert d == fits["A64H64"].coef.shape[0]


def test_addition_tests_are_holm_corrected():
    from halluprobe.evaluation import MethodScores, evaluate_methods
    from halluprobe.pipeline._report import addition_tests
    from halubench_data.metrics import holm, paired_bootstrap

    rng = np.random.default_rng(7)
    y = rng.permutation(np.arange(60) % 2)
    groups = [f"g{i // 3}" for i in range(60)]
    scores = {
        name: rng.random(60) + (0.5 * y if "A7" in name else 0.0) for name in ("H64", "A7H64", "L9", "A7L9")
    }
    methods = [MethodScores(name, "probe", s[:10], s, 0.6) for name, s in scores.items()]
    rows = addition_tests(evaluate_methods("toy", methods, y, groups, n_bootstrap=10), n=20_000)
    assert [(r.a, r.b) for r in rows] == [("H64", "A7H64"), ("L9", "A7L9")]
    ref = paired_bootstrap(
        scores["L9"], scores["A7L9"], y, groups, "f1", n=20_000, seed=42, thresholds=(0.6, 0.6)
    )
    assert rows[1].delta == pytest.approx(ref.delta) and rows[1].p == pytest.approx(ref.p_value)
    np.testing.assert_allclose([r.p_holm for r in rows], holm([r.p for r in rows]))
