"""benchmarks/paper_j_fig1.py: its ratios, its budget, and a smoke run on the CPU."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("paper_j_fig1")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        for name in ("paper_j_fig1", "_perf"):
            sys.modules.pop(name, None)


def _csv(points):
    """A stand-in for the run's CSV: ``{(L, mode or provider): (ms, MiB)}`` as long-format rows."""
    rows = []
    for (length, name), (ms, mib) in points.items():
        common = dict(L=str(length), ms=str(ms), extra_peak_mib=str(mib), gap="effective_support 1%")
        if name in ("plain", "ours", "dense", "output_attentions"):
            rows.append(dict(common, B="1", R="256", provider=name))
        else:
            rows.append(dict(common, layers="8", R="512", mode=name))
    return SimpleNamespace(rows=rows)


def test_figure1_overheads_are_eager_vs_eager_and_graphed_vs_the_faster_plain(bench):
    table, curve = bench.fig1_table(
        _csv(
            {
                (2048, "plain_eager"): (100.0, 50.0),
                (2048, "ours_eager"): (110.0, 62.5),
                (2048, "plain_graph"): (90.0, ""),
                (2048, "ours_graph"): (99.0, ""),
                (4096, "plain_eager"): (200.0, 80.0),
                (4096, "ours_eager"): (190.0, 81.0),
                (4096, "plain_graph"): (250.0, ""),
                (4096, "ours_graph"): (210.0, ""),
            }
        )  # fmt: skip
    )
    assert curve == [(2048, 10.0, 10.0), (4096, -5.0, 5.0)]  # graphed 4096 against the eager plain 200
    assert "| 8 | 2048 | 512 | 100.0 | 110.0 | +10.0 | 90.0 | 99.0 | +10.0 | 12.5 | +16.0 |" in table


def test_appendix_j_table_compares_ours_with_dense_and_names_missing_providers(bench):
    table = bench.j_table(
        _csv(
            {
                (1024, "plain"): (0.05, 8.0),
                (1024, "ours"): (0.3, 14.0),
                (1024, "dense"): (0.25, 116.0),
                (1024, "output_attentions"): (0.4, 80.0),
                (32768, "ours"): (3.0, 520.0),
                (32768, "dense"): (6.0, 2100.0),
            }
        )  # fmt: skip
    )
    assert (
        "| 1 | 1024 | 256 | 0.05 | 0.3 | 0.25 | 0.4 | 1.20 | 14.0 | 116.0 | 80.0 | 2 | effective_support 1% |"
        in table
    )
    assert (
        "| 1 | 32768 | 256 |  | 3.0 | 6.0 |  | 0.50 | 520.0 | 2100.0 |  | 2304 | effective_support 1% |"
        in table
    )


def test_figure1_skips_points_that_do_not_fit_the_budget(bench, monkeypatch):
    ran = []

    def point(dev, csv, model, length, rows, reps):
        ran.append(length)
        return 500.0  # the plain forward's ms at every length run

    monkeypatch.setattr(bench, "fig1_point", point)
    deadline = bench.Deadline(40.0)
    notes = bench.figure1(None, None, deadline, None, (2048, 35840, 4096), 512)
    # from 2048 (0.5 s a forward), 35840 needs 4 * 2 + 11 forwards of 28x the work: about 267 s, skipped;
    # 4096 needs 4 * 4 + 11 forwards of 2.1x the work: about 28 s of the 40, run
    assert ran == [2048, 4096]
    assert len(notes) == 1 and notes[0].startswith("L=35840: not run (estimated 267 s")
    assert deadline.end > time.monotonic()


@pytest.mark.slow  # a tiny model's recorded forwards and the report, in a fresh process (~30-60 s on 2 cores)
def test_smoke_run_writes_both_tables_with_provenance_and_the_figure(tmp_path):
    cmd = [sys.executable, "benchmarks/paper_j_fig1.py", "--smoke", "--layers", "2", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=600)
    for name, key in (("paper_j.csv", "provider"), ("paper_fig1.csv", "mode")):
        with (tmp_path / name).open() as fh:
            rows = list(csv.DictReader(fh))
        assert rows and all(r["date"] and r["gpu"] == "cpu" and r["torch"] and r["triton"] for r in rows)
        want = (
            {"plain", "ours", "dense", "output_attentions"}
            if key == "provider"
            else {"plain_eager", "ours_eager"}
        )
        assert {r[key] for r in rows} == want
    text = (tmp_path / "paper_j_fig1.md").read_text()
    assert "Smoke run" in text and "## Appendix J" in text and "## Figure 1" in text
    assert (tmp_path / "paper_fig1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gap_names_the_statistic_where_dense_differs_most(bench):
    import torch

    def result(entropy, column):
        same = torch.tensor([0.5, 0.25])
        return SimpleNamespace(
            rows=SimpleNamespace(entropy=torch.tensor(entropy), max_weight=same),
            lookups=SimpleNamespace(prev_weight=same),
            columns=SimpleNamespace(sum=torch.tensor(column)),
        )

    ours, dense = result([1.0, 2.0], [4.0, 4.0]), result([1.1, 2.2], [4.0, 4.1])
    assert (
        bench._gap(ours, dense) == "entropy 10%"
    )  # mean |0.1, 0.2| / mean |1, 2|, above the columns' 1.25 %


def test_forward_cost_fits_memory_per_answer_token_and_applies_the_target():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        fc = importlib.import_module("forward_cost")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rows = []
    for length, fixed, per in (
        (2048, 10.0, 0.03),
        (8192, 70.0, 0.02),
        (16384, 5.0, 0.02),
    ):  # MiB, MiB / token
        for r in fc.ANSWERS:
            mib, kib = f"{fixed + per * r}", "36.00" if r == 512 else ""
            rows.append(dict(section="memory", L=length, R=r, mode="ours", extra_peak_mib=mib,
                             stats_kib_per_token=kib))  # fmt: skip
    table = fc.memory_table(SimpleNamespace(rows=rows))
    # 0.03 MiB = 30.7 KiB per token: over the paper's 28; 70 MiB fixed: over 64; 20.5 KiB and 5 MiB: met
    assert "| 2048 | 17.7 | 25.4 | 40.7 | 30.7 | 10.0 | 36.00 |  | missed |" in table
    assert "| 8192 | 75.1 | 80.2 | 90.5 | 20.5 | 70.0 | 36.00 |  | missed |" in table
    assert "| 16384 | 10.1 | 15.2 | 25.5 | 20.5 | 5.0 | 36.00 |  | met |" in table
    times = {"plain": "1000", "ours_base": "1010", "ours_t1": "1015", "ours_t2": "1016", "ours_t3": "1030"}
    whole = [dict(section="breakdown", L=32768, R=512, mode=m, ms=ms) for m, ms in times.items()]
    text = fc.breakdown_table(SimpleNamespace(rows=whole))
    assert "| 32768 | 1000.0 | +1.0 | +1.5 | +1.6 | +3.0 | 10.0 | 5.0 | 1.0 | 14.0 |" in text
