import numpy as np
import pytest
from halluprobe.detectors._published import (
    INTRYGUE,
    RAUQ,
    TOHA,
    LLMCheckAttention,
    LookbackLens,
    LookbackLensHeads,
    SinkProbe,
    SinkRate,
    intrygue_matrix,
    logdiag_matrix,
    lookback_matrix,
    mtopdiv,
    rauq_matrix,
    rauq_score,
    sink_matrix,
    toha_matrix,
)
from halluprobe.features import HEAD_STATS
from scipy.sparse.csgraph import minimum_spanning_tree
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks


def _expected_failures(est):
    out = {}
    if isinstance(est, (INTRYGUE, TOHA)):
        out["check_classifiers_train"] = (
            "a product/mean of fixed columns is no general classifier of blob data"
        )
    if isinstance(est, INTRYGUE):
        out["check_fit2d_1feature"] = "INTRYGUE needs an entropy column and at least one head column"
    return out


@parametrize_with_checks(
    [
        LookbackLens(),
        LookbackLensHeads(max_heads=3),
        SinkProbe(C=0.1),
        LLMCheckAttention(),
        INTRYGUE(),
        SinkRate(),
        TOHA(max_heads=3),
    ],  # fmt: skip
    expected_failed_checks=_expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _labels(n, seed=0):
    return np.random.default_rng(seed).permutation(np.arange(n) % 2)


def test_llmcheck_chooses_informative_layer_and_sign():
    rng = np.random.default_rng(0)
    y = _labels(300)
    X = rng.normal(size=(300, 5))
    X[:, 3] -= 1.5 * y  # hallucinated answers have a lower mean log p_ii in layer 3
    det = LLMCheckAttention().fit(X, y)
    assert det.layer_ == 3 and det.sign_ == -1
    fixed = LLMCheckAttention(direction=1).fit(X, y)
    assert fixed.sign_ == 1
    with pytest.raises(ValueError, match="direction"):
        LLMCheckAttention(direction=2).fit(X, y)


def test_intrygue_picks_the_gated_heads():
    rng = np.random.default_rng(1)
    y = _labels(400)
    ent = rng.uniform(1.0, 2.0, size=400)
    sinks = rng.uniform(0.0, 1.0, size=(400, 6))
    sinks[:, 4] = np.where(y == 1, rng.uniform(0.6, 1.0, 400), rng.uniform(0.0, 0.4, 400))
    X = np.hstack([ent[:, None], sinks])
    det = INTRYGUE(head_order=[4, 0, 1, 2, 3, 5], ks=(1, 2, 4)).fit(X, y)
    assert det.heads_.tolist() == [4]
    np.testing.assert_allclose(det.raw_score(X), ent * sinks[:, 4])
    with pytest.raises(ValueError, match="head_order"):
        INTRYGUE(head_order=[9]).fit(X, y)


def test_sink_rate_alone_ignores_the_entropy():
    # INTRYGUE's sink-rate term alone (Appendix M): the entropy column must not matter
    rng = np.random.default_rng(1)
    y = _labels(400)
    sinks = rng.uniform(0.0, 1.0, size=(400, 6))
    sinks[:, 4] = np.where(y == 1, rng.uniform(0.6, 1.0, 400), rng.uniform(0.0, 0.4, 400))
    ent = np.where(y == 1, 0.01, 5.0)  # an entropy that would reverse INTRYGUE's product
    X = np.hstack([ent[:, None], sinks])
    det = SinkRate(head_order=[4, 0, 1, 2, 3, 5], ks=(1, 2, 4)).fit(X, y)
    assert det.heads_.tolist() == [4]
    np.testing.assert_allclose(det.raw_score(X), sinks[:, 4])
    X2 = X.copy()
    X2[:, 0] = rng.normal(size=400)
    np.testing.assert_array_equal(det.raw_score(X2), det.raw_score(X))
    assert not np.allclose(INTRYGUE(head_order=[4], ks=(1,)).fit(X, y).raw_score(X), sinks[:, 4])


def test_lookback_lens_heads_averages_at_most_ten_heads():
    rng = np.random.default_rng(3)
    y = _labels(300)
    X = rng.uniform(0.3, 0.7, size=(300, 40))
    informative = [5, 17, 33]
    X[:, informative] -= 0.15 * y[:, None]  # hallucinated answers look back at the context less
    det = LookbackLensHeads().fit(X, y)
    assert 1 <= len(det.heads_) <= 10 and set(informative) <= set(det.heads_.tolist())
    np.testing.assert_allclose(det.raw_score(X), -X[:, det.heads_].mean(1))
    assert len(LookbackLensHeads(max_heads=2).fit(X, y).heads_) <= 2
    with pytest.raises(ValueError, match="max_heads"):
        LookbackLensHeads(max_heads=0).fit(X, y)


def test_toha_selects_divergent_heads():
    rng = np.random.default_rng(2)
    y = _labels(300)
    X = rng.uniform(0.2, 0.4, size=(300, 8))
    X[:, [2, 6]] += 0.08 * y[:, None]
    det = TOHA(max_heads=4).fit(X, y)
    assert sorted(det.heads_.tolist()) == [2, 6]


def test_linear_probes_rank_and_predict_proba():
    rng = np.random.default_rng(3)
    y = _labels(200)
    X = rng.normal(size=(200, 4))
    X[:, 1] += 2.0 * y
    for det in (LookbackLens(), SinkProbe()):
        det.fit(X, y)
        p = det.predict_proba(X)
        assert p.shape == (200, 2)
        np.testing.assert_allclose(p.sum(1), 1.0)
        assert p[y == 1, 1].mean() > p[y == 0, 1].mean() + 0.3
        assert det.coef_[1] > 0


def test_mtopdiv_hand_cases():
    # P = 3 prompt keys, R = 3 response rows, L = 6
    w = np.zeros((3, 6))
    w[:, 0] = 1.0  # everything on the first prompt key: every response token touches the prompt at 0
    assert mtopdiv(w, 3) == pytest.approx(0.0)
    w = np.zeros((3, 6))
    w[0, 1] = 0.5
    w[0, 3] = 0.5  # first response row: half on the prompt
    w[1, 3] = 1.0  # the rest chain to the previous response token
    w[2, 4] = 1.0
    assert mtopdiv(w, 3) == pytest.approx(0.5 / 3)
    with pytest.raises(ValueError, match="prompt_len"):
        mtopdiv(w, 4)


@pytest.mark.parametrize(
    "shape", [(1, 4, 3), (5, 12, 7), (9, 30, 20)], ids=lambda s: f"R{s[0]}-L{s[1]}-P{s[2]}"
)
def test_mtopdiv_matches_scipy_mst(shape):
    r, length, p = shape
    rng = np.random.default_rng(r)
    w = rng.dirichlet(np.ones(length), size=r)
    # reference graph: the prompt contracted to vertex 0; weights 1 - p as edge lengths (+1e-9 keeps zeros)
    g = np.zeros((r + 1, r + 1))
    start = length - r
    for i in range(r):
        g[0, 1 + i] = 1.0 - w[i, :p].max() + 1e-9
        for j in range(i):
            g[1 + j, 1 + i] = 1.0 - w[i, start + j] + 1e-9
    ref = (minimum_spanning_tree(g).sum() - r * 1e-9) / r
    assert mtopdiv(w, p) == pytest.approx(ref, abs=1e-7)


def test_rauq_hand_case_and_selection():
    prob = np.array([0.5, 0.2, 0.9])
    prev = np.zeros((2, 2, 3))
    prev[0, 1] = [0.0, 0.8, 0.6]  # layer 0: head 1 is the previous-token head
    prev[0, 0] = [0.0, 0.1, 0.1]
    prev[1, 0] = [0.0, 1.0, 1.0]  # layer 1: head 0
    a = 0.2

    def layer_u(w):
        c = [prob[0]]
        for t in (1, 2):
            c.append(a * prob[t] + (1 - a) * w[t] * c[-1])
        return -np.mean(np.log(c))

    ref = max(layer_u(prev[0, 1]), layer_u(prev[1, 0]))
    assert rauq_score(prev, prob, a) == pytest.approx(ref)
    det = RAUQ(alpha=a).fit()
    # the array input: row 0 probabilities, then each layer's previous-token head (NaN after the answer)
    X = np.full((2, 3, 4), np.nan)
    X[0, 0, :3], X[1, 0, :3] = prob, np.ones(3)
    X[:, 1, :3], X[:, 2, :3] = prev[0, 1], prev[1, 0]
    np.testing.assert_allclose(det.raw_score(X), [ref, layer_u_ones(prev, a)])
    np.testing.assert_allclose(det.decision_function(X), det.raw_score(X) - np.log(2.0))
    p = det.predict_proba(X)
    assert p.shape == (2, 2)
    np.testing.assert_allclose(p[:, 1], 1.0 - np.exp(-det.raw_score(X)))
    np.testing.assert_array_equal(det.predict(X), (p[:, 1] > 0.5).astype(int))
    with pytest.raises(ValueError, match="rauq_matrix"):
        det.raw_score(X[:, 0])
    with pytest.raises(ValueError, match="alpha"):
        RAUQ(alpha=0.0).fit()
    with pytest.raises(ValueError, match="token_prev"):
        rauq_score(prev, np.ones(2), a)


def layer_u_ones(prev, a):
    out = []
    for layer in prev:
        w = layer[layer.mean(1).argmax()]
        c = [1.0]
        for t in (1, 2):
            c.append(a + (1 - a) * w[t] * c[-1])
        out.append(-np.mean(np.log(c)))
    return max(out)


def test_matrices_from_records(record_factory):
    rng = np.random.default_rng(4)
    recs = [record_factory(f"r{i}", rng, nl=2, h=3, mtopdiv=True) for i in range(4)]
    s = HEAD_STATS.index("lookback_ratio")
    np.testing.assert_allclose(
        lookback_matrix(recs)[1], recs[1].head_stats[:, :, s, 0].reshape(-1), rtol=1e-6
    )
    assert sink_matrix(recs, 3).shape == (4, 18)
    d = HEAD_STATS.index("diag_log")
    np.testing.assert_allclose(logdiag_matrix(recs)[2], recs[2].head_stats[:, :, d, 0].mean(1), rtol=1e-6)
    x = intrygue_matrix(recs, entropy_index=0)
    assert x.shape == (4, 7)
    np.testing.assert_allclose(x[:, 0], [r.logit_pooled[0, 0] for r in recs], rtol=1e-6)
    assert toha_matrix(recs).shape == (4, 6)
    with pytest.raises(ValueError, match="TOHA"):
        toha_matrix([record_factory("x", rng)])


def test_rauq_matrix_from_records_matches_the_per_answer_score(record_factory):
    rng = np.random.default_rng(5)
    recs = [record_factory(f"r{i}", rng, nl=2, h=3, a=a) for i, a in enumerate((5, 2, 7))]
    X = rauq_matrix(recs, logprob_index=0)
    assert X.shape == (3, 3, 7)
    assert np.isnan(X[1, :, 2:]).all() and not np.isnan(X[1, :, :2]).any()
    ref = [rauq_score(r.token_prev, np.exp(r.token_logit[:, 0]), 0.2) for r in recs]
    np.testing.assert_array_equal(RAUQ().fit().raw_score(X), ref)
    det = RAUQ().fit(X, np.array([0, 1, 1]))
    assert det.predict_proba(X).shape == (3, 2)


SUPERVISED = (
    LookbackLens(),
    LookbackLensHeads(max_heads=3),
    SinkProbe(),
    LLMCheckAttention(),
    INTRYGUE(ks=(1, 2)),
    SinkRate(ks=(1, 2)),
    TOHA(max_heads=3),
)


@pytest.mark.parametrize("det", SUPERVISED, ids=lambda d: type(d).__name__)
def test_every_detector_predict_proba_is_n_by_2_and_agrees_with_predict(det):
    rng = np.random.default_rng(6)
    y = _labels(120)
    X = rng.random((120, 5))
    X[:, 1:3] += 0.8 * y[:, None]
    X[:, 0] = 1.0 + X[:, 0]
    det = clone(det).fit(X, y)
    p = det.predict_proba(X)
    assert p.shape == (120, 2)
    np.testing.assert_allclose(p.sum(1), 1.0)
    np.testing.assert_array_equal(det.classes_[p.argmax(1)], det.predict(X))
    # the probability ranks like the decision function (a monotone map of it)
    order = np.argsort(det.decision_function(X), kind="stable")
    assert np.all(np.diff(p[order, 1]) >= 0)
    assert p[y == 1, 1].mean() > p[y == 0, 1].mean()


def test_platt_slope_fits_the_known_logistic_slope():
    from halluprobe.detectors._published import _platt_slope

    rng = np.random.default_rng(7)
    z = rng.normal(size=20_000)
    y = (rng.random(20_000) < 1.0 / (1.0 + np.exp(-2.5 * z))).astype(int)
    assert _platt_slope(z, y) == pytest.approx(2.5, rel=0.08)
    assert _platt_slope(z, 1 - y) == pytest.approx(1e-6)  # anti-correlated: no signal, floor
    assert _platt_slope(np.zeros(5), np.array([0, 1, 0, 1, 1])) == pytest.approx(1e-6)
