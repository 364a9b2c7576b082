import numpy as np
import pytest
from halubench_data import metrics as M
from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score


def _data(n=157, g=23, seed=0, ties=True):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = y * 0.8 + rng.normal(size=n)
    if ties:
        s = np.round(s, 1)
    groups = np.array([f"g{i}" for i in rng.integers(0, g, n)])
    return s, y, groups


def test_auroc_matches_sklearn_with_ties():
    s, y, _ = _data()
    assert M.auroc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert M.auroc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5


@pytest.mark.parametrize("t", [-0.5, 0.3, 1.2])
def test_precision_recall_f1_match_sklearn(t):
    s, y, _ = _data(seed=1)
    pred = (s >= t).astype(int)
    p, r, f = M.precision_recall_f1(s, y, t)
    assert (p, r, f) == pytest.approx(
        (precision_score(y, pred, zero_division=0), recall_score(y, pred), f1_score(y, pred))
    )
    assert M.f1_at(s, y, t) == pytest.approx(f)


def test_select_threshold_maximises_f1_and_breaks_ties_upward():
    s, y, _ = _data(seed=2)
    t = M.select_threshold(s, y)
    best = max(M.f1_at(s, y, u) for u in np.unique(s))
    assert M.f1_at(s, y, t) == pytest.approx(best)
    assert all(M.f1_at(s, y, u) < best - 1e-12 for u in np.unique(s) if u > t)
    # F1 is 2/3 at both 0.3 and 0.9: the higher threshold wins
    assert M.select_threshold([0.1, 0.3, 0.5, 0.7, 0.9], [0, 1, 0, 0, 1]) == 0.9


def test_bad_input_raises():
    with pytest.raises(ValueError, match="both labels"):
        M.auroc([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="labels must be 0"):
        M.auroc([0.1, 0.2], [1, 2])
    with pytest.raises(ValueError, match="equal length"):
        M.auroc([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="NaN"):
        M.auroc([np.nan, 0.2], [1, 0])
    with pytest.raises(ValueError, match="thresholds"):
        M.paired_bootstrap([0.1, 0.2], [0.1, 0.3], [0, 1], None, "f1")


def test_group_bootstrap_intervals_match_a_naive_loop():
    s, y, groups = _data(n=60, g=9, seed=3)
    t = 0.4
    res = M.evaluate(s, y, groups, t, n_bootstrap=300, seed=7)
    # naive reference: same resampled group indices, metrics recomputed from scratch with sklearn
    uniq = np.unique(groups)
    rng = np.random.default_rng(7)
    draws = rng.integers(0, uniq.size, size=(300, uniq.size))
    f1s, aucs = [], []
    for row in draws:
        idx = np.concatenate([np.flatnonzero(groups == uniq[k]) for k in row])
        f1s.append(f1_score(y[idx], (s[idx] >= t).astype(int), zero_division=0))
        aucs.append(roc_auc_score(y[idx], s[idx]) if 0 < y[idx].sum() < idx.size else np.nan)
    aucs = np.array(aucs)
    assert res.f1_ci == pytest.approx(tuple(np.quantile(f1s, [0.025, 0.975])), abs=1e-12)
    assert res.auroc_ci == pytest.approx(
        tuple(np.quantile(aucs[np.isfinite(aucs)], [0.025, 0.975])), abs=1e-12
    )
    assert res.f1 == pytest.approx(f1_score(y, (s >= t).astype(int)))
    assert (res.n, res.n_groups, res.n_positive) == (60, 9, int(y.sum()))
    assert M.evaluate(s, y, groups, t, n_bootstrap=300, seed=7) == res


def test_paired_bootstrap_hand_computed_f1_case():
    # group 1: one hallucinated answer that a misses and b catches; group 2: one supported answer.
    # Full data: F1(a)=0, F1(b)=1, delta=1. Of the 4 equally likely resamples, only (2, 2) has
    # delta* = 0 (no positive: both F1 = 0), so |delta* - 1| >= 1 with probability 1/4.
    delta, ci, p = M.paired_bootstrap(
        [0.0, 0.0], [1.0, 0.0], [1, 0], ["g1", "g2"], "f1", n=40_000, seed=42, thresholds=(0.5, 0.5)
    )
    assert delta == 1.0
    assert ci == (0.0, 1.0)
    assert p == pytest.approx(0.25, abs=0.01)


def test_paired_bootstrap_hand_computed_auroc_case():
    # a ranks group 2's pair wrongly: AUROC(a) = 3/4, AUROC(b) = 1, delta = 1/4. Resamples:
    # (1,1): delta* = 0, (2,2): delta* = 1, mixed (prob 1/2): delta* = 1/4. |delta* - 1/4| >= 1/4
    # holds for (1,1) and (2,2): p = 1/2.
    y = [1, 0, 1, 0]
    g = ["g1", "g1", "g2", "g2"]
    a = [0.8, 0.2, 0.3, 0.7]
    b = [0.8, 0.2, 0.9, 0.1]
    delta, ci, p = M.paired_bootstrap(a, b, y, g, "auroc", n=40_000, seed=1)
    assert delta == pytest.approx(0.25)
    assert ci == pytest.approx((0.0, 1.0))
    assert p == pytest.approx(0.5, abs=0.01)
    # swapping a and b flips the sign only
    d2, ci2, p2 = M.paired_bootstrap(b, a, y, g, "auroc", n=40_000, seed=1)
    assert d2 == pytest.approx(-0.25) and ci2 == pytest.approx((-1.0, 0.0)) and p2 == p


def test_paired_bootstrap_identical_detectors_give_p_one():
    s, y, groups = _data(seed=4)
    delta, ci, p = M.paired_bootstrap(s, s, y, groups, "auroc", n=1000)
    assert delta == 0.0 and ci == (0.0, 0.0) and p == 1.0


def test_paired_bootstrap_is_deterministic_for_a_seed():
    s, y, groups = _data(seed=5)
    s2 = s + np.random.default_rng(9).normal(size=s.size)
    r1 = M.paired_bootstrap(s, s2, y, groups, "f1", n=5000, seed=3, thresholds=(0.3, 0.4))
    r2 = M.paired_bootstrap(s, s2, y, groups, "f1", n=5000, seed=3, thresholds=(0.3, 0.4))
    assert r1 == r2


def test_holm_hand_computed():
    adj = M.holm([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    assert adj == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert M.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.holm([0.2, 1.5])


def test_results_table_formats_rows():
    s, y, groups = _data(seed=6)
    r = M.evaluate(s, y, groups, 0.4, n_bootstrap=200)
    table = M.results_table({"probe": r})
    assert table.splitlines()[0].startswith("| method | F1 [95% CI]")
    assert f"| probe | {r.f1:.3f} [{r.f1_ci[0]:.3f}, {r.f1_ci[1]:.3f}]" in table


def test_evaluate_without_groups_and_with_one_class():
    s, y, _ = _data(n=40, seed=8)
    per_example = M.evaluate(s, y, None, 0.4, n_bootstrap=500)
    assert per_example.n_groups == 40 and per_example.auroc == pytest.approx(roc_auc_score(y, s))
    lo, hi = per_example.auroc_ci
    assert lo < per_example.auroc < hi
    one_class = M.evaluate([0.1, 0.9, 0.5], [0, 0, 0], ["a", "b", "c"], 0.5, n_bootstrap=50)
    assert np.isnan(one_class.auroc) and one_class.f1 == 0.0 and one_class.precision == 0.0
    assert M.results_table([("x", per_example)]).count("\n") == 2


def test_f1_curve_equals_f1_at_at_every_threshold():
    from halubench_data.metrics import f1_at, f1_curve

    rng = np.random.default_rng(7)
    for n in (1, 5, 200):
        scores = np.round(rng.random(n), 2)  # ties
        labels = (rng.random(n) < 0.4).astype(int)
        labels[0] = 1
        cands = np.concatenate([np.unique(scores), [-1.0, 0.0, 0.555, 1.0, 2.0]])
        want = [f1_at(scores, labels, t) for t in cands]
        np.testing.assert_allclose(f1_curve(scores, labels, cands), want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="at least one hallucinated"):
        f1_curve([0.1, 0.2], [0, 0], np.array([0.5]))
