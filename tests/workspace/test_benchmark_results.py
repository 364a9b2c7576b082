"""``benchmarks/results/`` holds the current table of each benchmark, its provenance and the CSV behind it.

Superseded runs, failed-run logs and experiments live in git history, not in the tree. The rules:

- no ``.log`` file, and no file named like a before/after variant or after a tracker item
  (``*_after_*``, ``*_before*``, ``*issue*``);
- every Markdown table says when, where and with what it was measured: a date, the GPU or CPU, and the
  versions (torch or another package with its version). A run folder may say it once in its ``README.md``;
- every CSV is the data of a table: a Markdown file of the same name sits beside it, or a table (or the
  folder's ``README.md``) names it.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
FORBIDDEN_NAMES = ("*_after_*", "*_before*", "*issue*")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d")
MACHINE = re.compile(r"\b(GPU|CPU|H100|H200|A100|NVIDIA|x86_64|arm64)\b")
VERSIONS = re.compile(r"""\b(torch|triton|transformers|scikit-learn|halluprobe)['"]?[\s:=]+['"]?\d+\.\d+""")


def provenance_missing(text: str) -> list[str]:
    """What of date, machine and versions the text does not state (empty when all three are there)."""
    checks = {"a date": DATE, "the GPU or CPU": MACHINE, "versions": VERSIONS}
    return [what for what, pattern in checks.items() if not pattern.search(text)]


def problems(results: Path) -> list[str]:
    """Every rule broken by the files under ``results`` (an empty list when it is tidy)."""
    out = []
    files = sorted(p for p in results.rglob("*") if p.is_file())
    for path in files:
        name = path.relative_to(results).as_posix()
        if path.suffix == ".log":
            out.append(f"{name}: a log (keep the table and its CSV; logs live in git history)")
        if any(fnmatch.fnmatch(path.name.lower(), pat) for pat in FORBIDDEN_NAMES):
            out.append(f"{name}: a variant or tracker-named file (one current table per benchmark)")
    tables = {p: p.read_text(encoding="utf-8") for p in files if p.suffix == ".md"}
    for path, text in tables.items():
        readme = path.parent / "README.md"
        folder_says = readme in tables and not provenance_missing(tables[readme])
        missing = provenance_missing(text)
        if missing and not folder_says:
            out.append(f"{path.relative_to(results).as_posix()}: no provenance line ({', '.join(missing)})")
    for path in (p for p in files if p.suffix == ".csv"):
        beside = path.with_suffix(".md") in tables
        named = any(path.name in text for p, text in tables.items() if results in p.parents)
        if not (beside or named):
            out.append(f"{path.relative_to(results).as_posix()}: no table names this CSV")
    return out


def test_results_hold_current_tables_with_provenance_and_their_csvs():
    assert problems(RESULTS) == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("run.log", "", "a log"),
        ("streaming_after_fix.csv", "", "a variant"),
        ("decode_before.md", "2026-12-01, NVIDIA H200, torch 2.11.0", "a variant"),
        ("issue13.md", "2026-12-01, NVIDIA H200, torch 2.11.0", "tracker-named"),
        ("table.md", "| a |\n|---|\n| 1 |\n", "no provenance line (a date, the GPU or CPU, versions)"),
        ("table.md", "2026-12-01 on the CPU", "no provenance line (versions)"),
        ("orphan.csv", "a,b\n1,2\n", "no table names this CSV"),
    ],
)
def test_checker_reports_each_kind_of_clutter(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    found = problems(tmp_path)
    assert len(found) >= 1 and any(expected in p for p in found), found


def test_checker_accepts_a_table_with_provenance_and_its_csv(tmp_path):
    (tmp_path / "tier.md").write_text("# Tier table (NVIDIA H200, torch 2.11.0+cu130, 2026-11-30T04:10Z)\n")
    (tmp_path / "tier.csv").write_text("date,gpu\n")
    run = tmp_path / "detection"
    run.mkdir()
    (run / "README.md").write_text("2026-12-02, NVIDIA H200, torch 2.11.0; files: `main.csv`\n")
    (run / "main_table.md").write_text("| a |\n|---|\n")
    (run / "main.csv").write_text("a\n")
    assert problems(tmp_path) == []
