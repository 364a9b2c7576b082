"""What the detection benchmark asks of the package: judge methods, cost summaries, rebuilt reports."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from halluprobe.evaluation._sections import cost_summary
from halluprobe.evaluation._suite import judge_methods, pooled_judge
from halluprobe.evaluation._tables import device_name, rebuild_report
from halubench_data import Dataset, Example

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "detection"


def _ds(name="qa"):
    exs = [
        Example(f"{s}{i}", "s", "c", "q", "a", i % 2, f"g{i}", s)
        for s in ("validation", "test")
        for i in range(4)
    ]
    return Dataset(tuple(exs), name)


def _judge_doc(ds):
    return {"template": "plain", "datasets": {ds.name: {
        "test_ids": [e.id for e in ds.test], "test_scores": [0.1, 0.9, 0.2, 0.8],
        "validation_scores": [0.3, 0.7, 0.2, 0.6]}}}  # fmt: skip


def test_judge_methods_reads_a_judge_document():
    ds = _ds()
    (m,) = judge_methods(_judge_doc(ds), ds)
    assert m.name == "SmolLM2 judge (plain)" and m.kind == "judge"
    np.testing.assert_array_equal(m.test, [0.1, 0.9, 0.2, 0.8])
    assert m.threshold == 0.6  # the validation score with the best F1, ties to the higher one
    assert judge_methods(None, ds) == [] and judge_methods(_judge_doc(ds), _ds("other")) == []
    doc = _judge_doc(ds)
    doc["datasets"]["qa"]["test_ids"].reverse()
    with pytest.raises(ValueError, match="do not match"):
        judge_methods(doc, ds)


def test_pooled_judge_concatenates_validation_and_keeps_the_targets_it_scored():
    a, b = (
        {"validation_scores": [1.0], "test_scores": [2.0]},
        {"validation_scores": [3.0], "test_scores": [4.0]},
    )
    doc = {"template": "t", "datasets": {"a": a, "b": b}}
    got = pooled_judge(doc, ["a", "b"], ["b", "c"])
    assert got["name"] == "SmolLM2 judge (t)" and got["scores"] == {"b": [4.0]}
    np.testing.assert_array_equal(got["validation"], [1.0, 3.0])
    assert pooled_judge(None, ["a"], ["b"]) is None


def test_cost_summary_of_timing_rows():
    rows = [{"plain_s": 0.1, "plain_bytes": 2**20, "ours_s": 0.3, "ours_bytes": None},
            {"plain_s": 0.2, "plain_bytes": 3 * 2**20, "ours_s": 0.5, "ours_bytes": None}]  # fmt: skip
    got = cost_summary(rows)
    want = {"seconds_mean": 0.15, "seconds_median": 0.15, "peak_mib_mean": 2.0, "peak_mib_max": 3.0}
    assert got["plain"] == pytest.approx(want)
    assert got["ours"]["peak_mib_mean"] is None and got["ours"]["seconds_mean"] == pytest.approx(0.4)


def test_rebuild_report_gives_the_recorded_tables_back(tmp_path):
    for name in ("main.csv", "extract.json", "cost.json", "judge.json"):
        shutil.copy(RESULTS / name, tmp_path / name)
    rebuild_report(tmp_path)
    assert (tmp_path / "main_table.md").read_text() == (RESULTS / "main_table.md").read_text()
    assert (tmp_path / "judge_selection.md").read_text().startswith("Chosen: ")
    assert (tmp_path / "detection_auroc_bars.png").stat().st_size > 0
    cost = json.loads((RESULTS / "cost.json").read_text())
    assert f"median {cost['tokens_median']:.0f} tokens" in (tmp_path / "cost.md").read_text()


def test_device_name_of_the_cpu():
    assert device_name("cpu").startswith("CPU (")
