"""Grounding floors: the zero-fit overlap score, the fitted grounding regression, Δ floor in tables."""

import numpy as np
import pytest
from halubench_data import (
    FLOORS,
    GROUNDING_FEATURES,
    Example,
    GroundingFloor,
    auroc,
    best_floor,
    build_default,
    evaluate,
    floor_scores,
    grounding_matrix,
    overlap_score,
    overlap_scores,
    results_table,
)


def test_floor_scores_on_the_default_set():
    ds = build_default(n_contexts=30)
    scores = floor_scores(ds)
    assert tuple(scores) == FLOORS
    for val, test in scores.values():
        assert val.shape == (len(ds.validation),) and test.shape == (len(ds.test),)
        assert auroc(test, ds.test.labels) > 0.6  # the synthetic answers invent words when they hallucinate
    expected = [overlap_score(e.context, e.question, e.answer) for e in ds.test]
    np.testing.assert_array_equal(scores["overlap floor"][1], expected)


def test_grounding_floor_uses_sample_weights_and_validation_c():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 0] > 0).astype(int)
    w = np.where(np.arange(200) < 100, 3.0, 1.0)
    fit = GroundingFloor().fit(x[:100], y[:100], x[100:], y[100:], sample_weight=w[:100])
    assert fit.C_ in (0.001, 0.01, 0.1, 1.0, 10.0)
    assert auroc(fit.decision_function(x[100:]), y[100:]) > 0.95
    with pytest.raises(ValueError, match="not fitted"):
        GroundingFloor().decision_function(x)


def test_grounding_matrix_shape_and_empty():
    ex = Example("a", "s", "Ada lives in Lyon.", "Where?", "Ada lives in Rome.", 1, "g")
    assert grounding_matrix([ex, ex]).shape == (2, len(GROUNDING_FEATURES))
    assert grounding_matrix([]).shape == (0, len(GROUNDING_FEATURES))
    assert overlap_scores([ex])[0] == pytest.approx(1 / 3)  # ada, live, rome: rome is unsupported


def test_best_floor_and_the_delta_column():
    assert best_floor({"A7": 0.9, "overlap floor": 0.7, "grounding floor": 0.75}) == ("grounding floor", 0.75)
    assert best_floor({"A7": 0.9}) is None
    y = np.array([0, 1, 0, 1])
    res = evaluate(np.array([0.1, 0.9, 0.2, 0.8]), y, None, 0.5, n_bootstrap=10)
    table = results_table({"A7": res}, floor=0.75)
    assert "Δ floor" in table.splitlines()[0] and "| +0.250 |" in table
    assert "Δ floor" not in results_table({"A7": res})
