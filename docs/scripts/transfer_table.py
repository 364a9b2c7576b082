"""Render the per-source transfer table of docs/guide/packaged-detector.md from a transfer CSV.

The CSV is long format, one row per (held-out source, method), with at least the columns

- ``source``: the held-out source;
- ``method``: the method's name (a probe, a published detector, a floor, the packaged detector);
- ``kind``: ``floor`` for a zero-fit or text-only grounding floor, anything else for a detector;
- ``auroc``: AUROC on the held-out source's test split;

and optionally ``f1`` (at the method's own threshold) and ``f1_best`` (at the best threshold on that
split). Every method becomes a column of AUROC; the table adds, per source, the best floor and the
difference of every detector from it. The page's block between ``<!-- transfer-table:start -->`` and
``<!-- transfer-table:end -->`` is replaced; nothing else of the page changes.

Run from the repository root: ``uv run python docs/scripts/transfer_table.py RESULTS.csv``.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "packaged-detector.md"
START, END = "<!-- transfer-table:start -->", "<!-- transfer-table:end -->"
REQUIRED = ("source", "method", "kind", "auroc")


def _num(text: str) -> float:
    return float(text) if text not in ("", "nan", "NaN", "null") else math.nan


def _cell(x: float, signed: bool = False) -> str:
    return "—" if math.isnan(x) else (f"{x:+.3f}" if signed else f"{x:.3f}")


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows; `ValueError` naming the file when a required column is missing."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in REQUIRED if rows and c not in rows[0]] or ([] if rows else ["any row"])
    if missing:
        raise ValueError(f"{path}: the transfer CSV lacks {missing}; expected columns {REQUIRED}")
    return rows


def render(rows: list[dict[str, str]]) -> str:
    """The Markdown table: one row per held-out source, AUROC of each method, best floor, differences."""
    sources = list(dict.fromkeys(r["source"] for r in rows))
    floors = list(dict.fromkeys(r["method"] for r in rows if r["kind"] == "floor"))
    methods = list(dict.fromkeys(r["method"] for r in rows if r["kind"] != "floor"))
    auroc = {(r["source"], r["method"]): _num(r["auroc"]) for r in rows}
    head = ["held-out source", *methods, *floors, "best floor", *[f"{m} − floor" for m in methods]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    means: dict[str, list[float]] = {h: [] for h in head[1:]}
    for s in sources:
        best = max(
            (auroc.get((s, f), math.nan) for f in floors),
            default=math.nan,
            key=lambda x: -1 if math.isnan(x) else x,
        )
        vals = [auroc.get((s, m), math.nan) for m in (*methods, *floors)] + [best]
        deltas = [auroc.get((s, m), math.nan) - best for m in methods]
        for h, v in zip(head[1:], vals + deltas, strict=True):
            means[h].append(v)
        cells = [_cell(v) for v in vals] + [_cell(d, signed=True) for d in deltas]
        lines.append("| " + " | ".join([s, *cells]) + " |")
    mean_cells = []
    for i, h in enumerate(head[1:]):
        got = [v for v in means[h] if not math.isnan(v)]
        mean_cells.append(
            _cell(sum(got) / len(got) if got else math.nan, signed=i >= len(methods) + len(floors) + 1)
        )
    lines.append("| **mean** | " + " | ".join(mean_cells) + " |")
    return "\n".join(lines) + "\n"


def replace_block(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table`` (`ValueError` without the markers)."""
    if page.count(START) != 1 or page.count(END) != 1 or page.index(START) > page.index(END):
        raise ValueError(f"the page needs one {START} ... {END} block")
    head, rest = page.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}{END}{tail}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python docs/scripts/transfer_table.py RESULTS.csv")
    PAGE.write_text(replace_block(PAGE.read_text(encoding="utf-8"), render(read_rows(Path(sys.argv[1])))))
    print(f"wrote {PAGE.relative_to(ROOT)}")
