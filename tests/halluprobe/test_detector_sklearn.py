"""Detector as a scikit-learn classifier: params, clone, fit on records or texts, predict_proba [n, 2]."""

import numpy as np
import pytest
from halluprobe import Detector
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

DEGENERATE = "ignore::halluprobe.training._calibration.DegenerateFitWarning"


def planted(record_factory, n=120, seed=0):
    """``n`` records whose logit statistics carry the label (shifted up for label 1), labels alternating."""
    rng = np.random.default_rng(seed)
    records = [record_factory(f"r{i}", rng) for i in range(n)]
    y = np.arange(n) % 2
    for r, label in zip(records, y, strict=True):
        r.logit_pooled += 1.5 * label
    return records, y


@pytest.fixture
def fitted(record_factory):
    records, y = planted(record_factory)
    det = Detector("L9", hidden_layers=(1,), head_order=list(range(8)), random_state=3)
    return det.fit(records[:80], y[:80], groups=[f"g{i // 2}" for i in range(80)]), records, y


def test_get_params_round_trip_and_set_params():
    det = Detector("A7H64", proxy="p", layers=(0, 1), hidden_layers=(1,), validation_fraction=0.2)
    params = det.get_params()
    assert params["feature_set"] == "A7H64" and params["layers"] == (0, 1) and params["proxy"] == "p"
    again = Detector().set_params(**params)
    assert again.get_params() == params
    assert again.set_params(feature_set="L9").feature_set == "L9"
    with pytest.raises(ValueError, match="no_such"):
        det.set_params(no_such=1)


def test_clone_gives_an_unfitted_detector_with_the_same_params(fitted, tmp_path):
    det, records, _ = fitted
    check_is_fitted(det)
    for original in (det, Detector.load(det.save(tmp_path / "d"))):
        twin = clone(original)
        assert type(twin) is Detector and twin.get_params() == original.get_params()
        assert not hasattr(twin, "probe_")
        with pytest.raises(NotFittedError):
            check_is_fitted(twin)
    refit = clone(det).fit(records[:80], fitted[2][:80], groups=[f"g{i // 2}" for i in range(80)])
    np.testing.assert_array_equal(refit.predict_proba(records), det.predict_proba(records))  # deterministic


def test_fit_then_predict_proba_predict_and_decision_function(fitted):
    det, records, y = fitted
    held, y_held = records[80:], y[80:]
    proba = det.predict_proba(held)
    assert proba.shape == (40, 2) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(1), 1.0)
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-det.decision_function(held))))
    labels = det.predict(held)
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(labels, (proba[:, 1] >= det.probe_.threshold).astype(np.int64))
    np.testing.assert_array_equal(det.classes_, [0, 1])
    from halubench_data.metrics import auroc

    assert auroc(proba[:, 1], y_held) > 0.9  # the planted signal is learned, on rows fit never saw
    assert det.score(held, y_held) == pytest.approx(float(np.mean(labels == y_held)))
    assert det.probe_.feature_set == "L9" and det.hidden_layers_ == (1,)


def test_fit_takes_a_validation_mask_and_refuses_bad_labels(record_factory):
    records, y = planted(record_factory, n=80)
    mask = np.arange(80) >= 60
    det = Detector("L9", hidden_layers=(1,)).fit(records, y, validation=mask)
    assert 0.0 <= det.probe_.threshold <= 1.0
    with pytest.raises(ValueError, match=r"one label per row of X: expected shape \(80,\)"):
        Detector("L9", hidden_layers=(1,)).fit(records, y[:-1])
    with pytest.raises(ValueError, match="labels 0 .* and 1"):
        Detector("L9", hidden_layers=(1,)).fit(records, y + 1)
    with pytest.raises(ValueError, match="validation rows need both labels"):
        Detector("L9", hidden_layers=(1,)).fit(records, y, validation=(y == 1) & (np.arange(80) < 20))
    with pytest.raises(ValueError, match="unknown|feature"):
        Detector("Z9", hidden_layers=(1,)).fit(records, y)
    with pytest.raises(ValueError, match="sequence of examples or records"):
        Detector("L9", hidden_layers=(1,)).fit("not rows", y)


TEXTS = [
    ("the red kite nests in oak", "where?", "in oak"),
    ("a blue jay eats seeds daily", "what?", "it eats fish"),
    ("amber stones lie by the river", "", "by the road"),
    ("kelp grows in cold water", "where?", "in cold water"),
]


@pytest.mark.slow
@pytest.mark.filterwarnings(DEGENERATE)  # random weights: the probe has little to learn
def test_fit_and_score_texts_through_the_proxy(char_proxy):
    rows = [{"context": f"{c} {i}", "question": q, "answer": a} for i in range(10) for c, q, a in TEXTS]
    y = np.array([i % 2 for i in range(len(rows))])
    det = Detector("L9", batch_size=40).fit(rows, y)
    assert det.hidden_layers_ == (1,)  # the proxy's middle layer (2 layers)
    proba = det.predict_proba(TEXTS)
    assert proba.shape == (4, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    batch = det.predict_batch(TEXTS)
    np.testing.assert_allclose([p.probability for p in batch], proba[:, 1], atol=1e-5)
    with pytest.warns(DeprecationWarning, match="use Detector.predict_text"):
        old = det.predict(*TEXTS[0])
    assert old.probability == pytest.approx(batch[0].probability, abs=1e-5)
    assert list(det.predict([{"context": TEXTS[1][0], "answer": TEXTS[1][2]}])) in ([0], [1])
