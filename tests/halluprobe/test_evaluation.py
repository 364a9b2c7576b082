"""halluprobe.evaluation: typed results, paired tests with Holm families, transfer, written outputs."""

import json

import numpy as np
import pytest
from halluprobe.evaluation import (
    MethodScores,
    evaluate_methods,
    holm_families,
    paired_test,
    transfer,
    write_results,
)
from halubench_data import evaluate, holm, paired_bootstrap, select_threshold


@pytest.fixture
def toy():
    rng = np.random.default_rng(7)
    n_val, n_test = 40, 61
    y_val, y_test = rng.integers(0, 2, n_val), rng.integers(0, 2, n_test)
    groups = [f"g{i // 3}" for i in range(n_test)]
    methods = [
        MethodScores.chosen_on_validation(
            name, "probe", y_val * w + rng.normal(size=n_val), y_test * w + rng.normal(size=n_test), y_val
        )
        for name, w in (("weak", 0.3), ("mid", 1.0), ("strong", 2.5))
    ]
    return methods, y_val, y_test, groups


def test_evaluate_methods_matches_the_shared_metrics(toy):
    methods, y_val, y_test, groups = toy
    ev = evaluate_methods("toy", methods, y_test, groups, n_bootstrap=300)
    assert list(ev.results) == ["weak", "mid", "strong"]
    for m in methods:
        assert m.threshold == select_threshold(m.validation, y_val)
        assert ev.results[m.name] == evaluate(m.test, y_test, groups, m.threshold, n_bootstrap=300)
    assert ev.results["strong"].auroc > ev.results["weak"].auroc


def test_evaluate_methods_rejects_bad_inputs(toy):
    methods, _, y_test, groups = toy
    with pytest.raises(ValueError, match="two methods are named 'mid'"):
        evaluate_methods("toy", [methods[1], methods[1]], y_test, groups, n_bootstrap=10)
    with pytest.raises(ValueError, match="60 test scores for 61"):
        short = MethodScores("short", "probe", methods[0].validation, methods[0].test[:60], 0.0)
        evaluate_methods("toy", [short], y_test, groups, n_bootstrap=10)


def test_paired_tests_and_holm_families(toy):
    methods, _, y_test, groups = toy
    ev = evaluate_methods("toy", methods, y_test, groups, n_bootstrap=10)
    t = paired_test(ev, "weak", "strong", "f1", family="additions", n=500)
    ref = paired_bootstrap(
        methods[0].test, methods[2].test, y_test, groups, "f1", n=500, seed=42,
        thresholds=(methods[0].threshold, methods[2].threshold),
    )  # fmt: skip
    assert (t.delta, t.ci, t.p, t.key) == (ref.delta, ref.ci, ref.p_value, "weak->strong/f1")
    same = paired_test(ev, "mid", "mid", "auroc", family="x", n=200)
    assert same.delta == 0.0 and same.p == 1.0
    tests = [
        paired_test(ev, "weak", "strong", "auroc", family="a", key="k", n=300),
        paired_test(ev, "weak", "mid", "auroc", family="a", key="k", n=300),
        paired_test(ev, "mid", "strong", "auroc", family="b", key="k", n=300),
    ]
    adjusted = holm_families(tests)
    np.testing.assert_allclose([t.p_holm for t in adjusted[:2]], holm([tests[0].p, tests[1].p]))
    assert adjusted[2].p_holm == tests[2].p  # a family of one is not corrected
    assert [t.b for t in adjusted] == ["strong", "mid", "strong"]


def test_transfer_uses_the_fitting_threshold(toy):
    methods, _, y_test, groups = toy
    m = methods[2]
    res = transfer(lambda xs: np.asarray(xs) * 2.0, m.threshold, list(m.test), y_test, groups,
                   fit="a", test="b", method="strong", n_bootstrap=200)  # fmt: skip
    assert (res.fit, res.test, res.method) == ("a", "b", "strong")
    assert res.result == evaluate(m.test * 2.0, y_test, groups, m.threshold, n_bootstrap=200)


def test_write_results_json_markdown_and_plots(tmp_path, toy):
    methods, _, y_test, groups = toy
    ev = evaluate_methods("toy", methods, y_test, groups, n_bootstrap=50)
    one_class = evaluate_methods("flat", [methods[0]], np.zeros(61, int), groups, n_bootstrap=20)
    tests = holm_families([paired_test(ev, "weak", "strong", "f1", family="f", n=100)])
    tr = [transfer(lambda xs: np.asarray(xs), 0.0, list(methods[1].test), y_test, groups,
                   fit="toy", test="other", method="mid", n_bootstrap=20)]  # fmt: skip
    path = write_results(tmp_path, [ev, one_class], tests, tr, extra={"note": "x"})
    doc = json.loads(path.read_text())
    assert doc["datasets"]["toy"]["methods"]["strong"]["auroc"] == ev.results["strong"].auroc
    assert doc["datasets"]["toy"]["methods"]["weak"]["kind"] == "probe"
    assert doc["datasets"]["flat"]["methods"]["weak"]["auroc"] is None  # NaN written as null
    assert doc["paired_tests"][0]["p_holm"] == tests[0].p_holm and doc["note"] == "x"
    assert doc["transfer"][0]["test"] == "other"
    md = (tmp_path / "results.md").read_text()
    assert "## toy" in md and "weak → strong" in md and "mid: toy → other" in md
    assert (tmp_path / "toy-roc.png").stat().st_size > 0 and (tmp_path / "toy-pr.png").exists()
    assert not (tmp_path / "flat-roc.png").exists()  # one class: no curve
