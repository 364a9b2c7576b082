"""The change in every number of the main detection table between two runs (``main.csv`` files).

Usage: ``python benchmarks/detection/compare.py OLD/main.csv NEW/main.csv > delta.md``. For every
(dataset, method) present in either run it prints test F1 and AUROC before, after and the difference;
rows only in one run are marked as such. Reads the CSV that ``run.py --phase analyze`` writes.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def _read(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    with path.open(newline="") as f:
        return {
            (row["dataset"], row["method"]): {"f1": float(row["f1"]), "auroc": float(row["auroc"])}
            for row in csv.DictReader(f)
        }


def _cell(old: dict | None, new: dict | None, key: str) -> str:
    if old is None:
        return f"— → {new[key]:.3f} (new)"
    if new is None:
        return f"{old[key]:.3f} → — (gone)"
    return f"{old[key]:.3f} → {new[key]:.3f} ({new[key] - old[key]:+.3f})"


def compare(old_csv: Path, new_csv: Path) -> str:
    """Markdown table: per dataset and method, F1 and AUROC old → new (difference)."""
    old, new = _read(old_csv), _read(new_csv)
    keys = list(dict.fromkeys([*old, *new]))
    lines = ["| dataset | method | F1 old → new (Δ) | AUROC old → new (Δ) |", "|---|---|---|---|"]
    for key in keys:
        a, b = old.get(key), new.get(key)
        lines.append(f"| {key[0]} | {key[1]} | {_cell(a, b, 'f1')} | {_cell(a, b, 'auroc')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py OLD/main.csv NEW/main.csv")
    sys.stdout.write(compare(Path(sys.argv[1]), Path(sys.argv[2])))
