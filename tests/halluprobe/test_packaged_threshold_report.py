"""benchmarks/packaged_threshold.py: which rules it reports, its rates, and the detector it re-thresholds."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from halluprobe import Detector
from halluprobe.detectors._default import packaged_path
from halluprobe.training._calibration import transfer_threshold

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    if not (packaged_path() / "detector.json").is_file():
        pytest.skip("this checkout has no packaged detector")
    spec = importlib.util.spec_from_file_location(
        "packaged_threshold", ROOT / "benchmarks" / "packaged_threshold.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["packaged_threshold"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["packaged_threshold"]


def _write(out: Path, rows: list[tuple[str, str, int, float]]) -> None:
    out.mkdir(exist_ok=True)
    with (out / "probabilities.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("source", "split", "id", "label", "probability"))
        for i, (source, split, label, p) in enumerate(rows):
            w.writerow((source, split, f"{source}-{split}-{i}", label, repr(p)))


def _rows(bench, rng, labels=(0, 1)) -> tuple[list, dict]:
    """Every source's validation answers of ``labels`` and test answers of both labels, scored."""
    rows, totals = (
        [],
        dict.fromkeys(((s, w, y) for s in bench.SOURCES for w in ("validation", "test") for y in (0, 1)), 0),
    )
    for s in bench.SOURCES:
        for split in ("validation", "test"):
            for y in (0, 1):
                n = 6 + int(rng.integers(0, 4))
                totals[s, split, y] = n
                if split == "test" or y in labels:
                    rows += [(s, split, y, float(p)) for p in rng.beta(2 + 3 * y, 4, n)]
    return rows, totals


def test_false_alarm_rules_need_only_the_supported_validation_answers(bench, tmp_path):
    rows, totals = _rows(bench, np.random.default_rng(0), labels=(0,))
    _write(tmp_path, rows)
    text = bench.report(tmp_path, "# r", totals, previous=0.3)
    assert "| false-alarm@0.2 |" in text and "| previously shipped | 0.300 |" in text
    assert "| mean-f1 |" not in text and "Left out: mean-f1, calibrated-0.5" in text
    with pytest.raises(SystemExit, match="mean-f1 reads are not all scored"):
        bench.write_rethresholded(tmp_path, totals, "mean-f1", tmp_path / "det")
    assert not (tmp_path / "det").exists()


def test_every_rule_and_the_rates_when_all_is_scored(bench, tmp_path):
    rows, totals = _rows(bench, np.random.default_rng(1))
    _write(tmp_path, rows)
    text = bench.report(tmp_path, "# r", totals, previous=None)
    assert "Left out" not in text and f"Test splits of {len(bench.SOURCES)} sources" in text
    val = [r for r in rows if r[1] == "validation"]
    probs = {s: np.array([p for src, _, _, p in val if src == s]) for s in bench.SOURCES}
    labels = {s: np.array([y for src, _, y, _ in val if src == s]) for s in bench.SOURCES}
    t = transfer_threshold(probs, labels, "mean-f1")
    test = [(y, p) for _, w, y, p in rows if w == "test"]
    fa = np.mean([p >= t for y, p in test if y == 0])
    recall = np.mean([p >= t for y, p in test if y == 1])
    assert f"| mean-f1 | {t:.3f} | {fa:.3f} | {recall:.3f} |" in text


def test_the_rethresholded_detector_keeps_its_weights(bench, tmp_path):
    rows, totals = _rows(bench, np.random.default_rng(2), labels=(0,))
    _write(tmp_path, rows)
    folder = bench.write_rethresholded(tmp_path, totals, "false-alarm@0.2", tmp_path / "det")
    got, shipped = Detector.load(folder), Detector.load(packaged_path())
    val = [r for r in rows if r[1] == "validation"]
    probs = {s: np.array([p for src, _, _, p in val if src == s]) for s in bench.SOURCES}
    labels = {s: np.zeros(len(probs[s]), dtype=int) for s in bench.SOURCES}
    assert got.probe_.threshold == transfer_threshold(probs, labels, "false-alarm@0.2")
    assert got.probe_.selection["threshold_false_alarm_rate"] == 0.2
    np.testing.assert_array_equal(got.probe_.coef, shipped.probe_.coef)
    assert got.probe_.intercept == shipped.probe_.intercept
