"""Calibration, ECE, the transfer threshold and the degenerate-fit warning."""

import warnings

import numpy as np
import pytest
from halluprobe import Calibrator, DegenerateFitWarning
from halluprobe.cli import main
from halluprobe.training._calibration import (
    MIN_PER_CLASS,
    calibrate_probe,
    check_collapse,
    check_labels,
    expected_calibration_error,
    expected_f1_threshold,
    reliability_curve,
    source_weights,
    transfer_threshold,
)
from halluprobe.training._protocol import train_feature_sets
from halubench_data.metrics import f1_at, f1_curve


def _no_degenerate_warning():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", DegenerateFitWarning)
    return ctx


def test_ece_uses_equal_mass_bins_and_known_values():
    y = np.array([0, 1] * 50)
    assert expected_calibration_error(np.full(100, 0.9), y) == pytest.approx(0.4)
    curve = reliability_curve(np.linspace(0, 1, 103), np.ones(103), n_bins=10)
    assert curve.counts.sum() == 103 and curve.counts.max() - curve.counts.min() <= 1
    rng = np.random.default_rng(0)
    p = rng.random(20_000)
    assert expected_calibration_error(p, rng.random(20_000) < p) < 0.02  # calibrated by construction
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error(np.array([1.5]), np.array([1]))


@pytest.mark.parametrize("n", [2, 11], ids=["one-axes", "panels"])
def test_reliability_diagram_draws_every_curve(tmp_path, monkeypatch, n):
    import matplotlib.pyplot as plt
    from halluprobe.training import _calibration

    rng = np.random.default_rng(0)
    curves = {f"m{i}": reliability_curve(rng.random(200), rng.integers(0, 2, 200)) for i in range(n)}
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)  # keep the figure to look at it
    _calibration.plot_reliability(tmp_path / "r.png", curves, "t")
    (fig,) = drawn
    used = [ax for ax in fig.axes if ax.axison]
    lines = [ln for ax in used for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(lines) == n and (tmp_path / "r.png").stat().st_size > 0
    assert len(used) == (1 if n < _calibration.PANELS_FROM else n)
    with pytest.raises(ValueError, match="at least one curve"):
        _calibration.plot_reliability(tmp_path / "e.png", {})


def test_platt_recovers_the_logistic_link_and_isotonic_is_monotone():
    rng = np.random.default_rng(1)
    z = rng.normal(size=8000)
    y = (rng.random(8000) < 1 / (1 + np.exp(-(2.0 * z - 1.0)))).astype(int)
    cal = Calibrator().fit(z, y)
    assert cal.a_ == pytest.approx(2.0, abs=0.2) and cal.b_ == pytest.approx(-1.0, abs=0.2)
    iso = Calibrator("isotonic").fit(z, y)
    grid = np.linspace(-4, 4, 50)
    assert np.all(np.diff(iso(grid)) >= 0) and iso(grid).min() >= 0 and iso(grid).max() <= 1
    assert expected_calibration_error(iso(z), y) < 0.03
    with pytest.raises(ValueError, match="both classes"):
        Calibrator().fit(z, np.zeros_like(y))


def test_source_weights_give_every_source_the_same_total():
    w = source_weights(["a", "a", "a", "b"])
    np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2 / 3, 2.0])
    assert w.mean() == pytest.approx(1.0)


def test_expected_f1_threshold_follows_the_batch_base_rate_without_labels():
    # known values: flag the top k of [0.9, 0.8, 0.1, 0.1]; E[F1] = 2 * sum_top_k / (k + 1.9) peaks at k = 2
    assert expected_f1_threshold(np.array([0.1, 0.9, 0.1, 0.8])) == 0.8
    rng = np.random.default_rng(3)
    chosen = {}
    for rate in (0.15, 0.5, 0.85):  # calibrated scores of sources with different base rates
        logit = rng.normal(np.log(rate / (1 - rate)), 1.5, 4000)
        p = 1 / (1 + np.exp(-logit))
        y = (rng.random(p.size) < p).astype(int)
        t = chosen[rate] = expected_f1_threshold(p)
        best = f1_curve(p, y, np.quantile(p, np.linspace(0, 1, 401))).max()  # f1_at at each (test_metrics)
        assert f1_at(p, y, t) >= best - 0.02  # close to the oracle threshold, chosen with no label
        assert t == pytest.approx(best / 2, abs=0.03)  # calibrated scores: the F1-optimal threshold is F1*/2
    assert chosen[0.15] < chosen[0.5] < chosen[0.85]  # it follows the base rate, which no fixed one can
    assert expected_f1_threshold(np.zeros(3)) > 0  # nothing likely: nothing flagged
    for bad in (np.array([]), np.array([0.2, 1.5]), np.ones((2, 2)) / 2):
        with pytest.raises(ValueError, match="expected_f1_threshold"):
            expected_f1_threshold(bad)


def test_transfer_threshold_maximises_mean_f1_over_sources():
    rng = np.random.default_rng(2)
    probs = {"big": rng.random(400), "small": rng.random(40) * 0.5}
    labels = {
        "big": (rng.random(400) < probs["big"]).astype(int),
        "small": (rng.random(40) < 0.5).astype(int),
    }
    t = transfer_threshold(probs, labels)
    cands = np.unique(np.concatenate(list(probs.values())))
    mean_f1 = np.mean([f1_curve(probs[s], labels[s], cands) for s in probs], axis=0)  # f1_at at each
    assert np.mean([f1_at(probs[s], labels[s], t) for s in probs]) == pytest.approx(max(mean_f1))
    assert transfer_threshold(probs, labels, "calibrated-0.5") == 0.5
    with pytest.raises(ValueError, match="mean-f1"):
        transfer_threshold(probs, labels, "best")
    t = transfer_threshold(
        probs, labels, "false-alarm@0.2"
    )  # supported answers flagged: at most 20 % on average
    assert np.mean([np.mean(probs[s][labels[s] == 0] >= t) for s in probs]) <= 0.2


def test_check_labels_warns_on_a_missing_class_and_on_few_examples():
    enough = np.array([0, 1] * MIN_PER_CLASS)
    with pytest.warns(DegenerateFitWarning, match="training split lacks one class"):
        check_labels(np.zeros(40), enough)
    with pytest.warns(DegenerateFitWarning, match="validation split has fewer than 10 examples of a class"):
        check_labels(enough, np.array([0] * 30 + [1] * 9))
    ctx = _no_degenerate_warning()
    check_labels(enough, enough)
    ctx.__exit__(None, None, None)


def test_check_collapse_warns_when_the_inter_quartile_range_is_narrow():
    rng = np.random.default_rng(3)
    with pytest.warns(DegenerateFitWarning, match="collapsed"):  # the --limit 12 symptom
        check_collapse(rng.uniform(0.495, 0.501, 24), 0.498)
    with pytest.warns(DegenerateFitWarning, match="inter-quartile range"):  # narrow, far from the threshold
        check_collapse(rng.uniform(0.2, 0.205, 50), 0.5)
    crowded = np.r_[np.full(95, 0.5), np.linspace(0.1, 0.9, 4), 0.95]
    with pytest.warns(DegenerateFitWarning, match="95% within 0.005 of the threshold 0.500"):
        check_collapse(crowded, 0.5)
    ctx = _no_degenerate_warning()
    check_collapse(rng.random(100), 0.5)
    ctx.__exit__(None, None, None)


def _records(factory, n, seed, signal=1.0):
    from halluprobe.features._records import HEAD_STATS

    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    recs = []
    for i in range(n):
        r = factory(f"c{seed}-{i}", rng, nl=2, h=4)
        r.head_stats[:, :, : len(HEAD_STATS)] += signal * y[i]
        r.logit_pooled[:] += signal * y[i]
        recs.append(r)
    return recs, y


def test_healthy_fit_does_not_warn_and_calibration_folds_into_the_probe(record_factory):
    train, y_tr = _records(record_factory, 60, 0)
    val, y_va = _records(record_factory, 40, 1)
    ctx = _no_degenerate_warning()
    fits = train_feature_sets(["L9"], list(range(8)), train, y_tr, [f"g{i}" for i in range(60)], val, y_va)
    ctx.__exit__(None, None, None)
    fit = fits["L9"]
    sources = ["a"] * 10 + ["b"] * 30
    cal = calibrate_probe(fit, val, y_va, sources)
    z = fit.decision_function(val)
    direct = Calibrator().fit(z, y_va, sample_weight=source_weights(sources))
    np.testing.assert_allclose(cal.predict_proba(val)[:, 1], direct(z), atol=1e-9)
    assert (cal.C, cal.val_auroc, cal.feature_set) == (fit.C, fit.val_auroc, fit.feature_set)
    p = cal.predict_proba(val)[:, 1]
    idx = {"a": np.arange(10), "b": np.arange(10, 40)}
    assert cal.threshold == transfer_threshold(
        {s: p[i] for s, i in idx.items()}, {s: y_va[i] for s, i in idx.items()}
    )


def test_training_warns_when_the_probabilities_collapse(record_factory):
    train, y_tr = _records(record_factory, 60, 4, signal=0.0)
    val, y_va = _records(record_factory, 40, 5, signal=0.0)
    for r in (*train, *val):
        r.logit_pooled[:] = 1.0  # L9 sees a constant: the probe can only say 0.5
    with pytest.warns(DegenerateFitWarning, match="L9: validation probabilities collapsed"):
        train_feature_sets(["L9"], list(range(8)), train, y_tr, [f"g{i}" for i in range(60)], val, y_va)


@pytest.mark.slow  # a whole `train` (test_cli_json.py runs one by default)
def test_cli_train_limit_12_prints_the_warning_on_one_line(char_proxy, tmp_path, capsys):
    argv = ["train", "--limit", "12", "--device", "cpu", "--out", str(tmp_path), "--feature-sets", "L9",
            "--no-published"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if "warning" in line]
    assert lines and all(line.startswith("halluprobe train: warning: ") for line in lines)
    assert any("fewer than 10 examples of a class" in line for line in lines)
    assert len(lines) == len(set(lines))


def test_batch_threshold_never_turns_a_batch_called_supported_into_hallucinated():
    from halluprobe.training._thresholds import batch_threshold

    supported = np.full(20, 0.078)  # every answer clearly supported at the detector's 0.26
    assert expected_f1_threshold(supported) == pytest.approx(0.078)  # the F1 rule alone flags all 20
    t = batch_threshold(supported, 0.26)
    assert t == 0.26 and not (supported >= t).any()
    rng = np.random.default_rng(0)
    varied = rng.uniform(0.01, 0.2, 50)  # all below the detector's threshold, spread out
    assert batch_threshold(varied, 0.26) == 0.26
    hallucinated = rng.uniform(0.7, 0.95, 20)
    t = batch_threshold(hallucinated, 0.26)
    assert t == expected_f1_threshold(hallucinated) and (hallucinated >= t).all()
    mixed = np.concatenate([supported, [0.9]])  # evidence of one hallucination: the batch rule applies
    assert batch_threshold(mixed, 0.26) == expected_f1_threshold(mixed) == 0.9
