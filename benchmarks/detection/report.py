"""Rebuild a results folder's Markdown tables and AUROC bars from its CSV/JSON alone (halluprobe.evaluation).

Used when a run's analysis wrote ``main.csv``, ``judge.json``, ``extract.json`` and ``cost.json`` but stopped
before its report. Usage: ``python benchmarks/detection/report.py RESULTS_FOLDER``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rebuild(folder: Path) -> None:
    """Write ``main_table.md``, ``detection_auroc_bars.png``, ``cost.md`` and ``judge_selection.md``."""
    from halluprobe.evaluation._report import plot_auroc_bars
    from halluprobe.evaluation._tables import (
        DATASET_NAMES,
        cost_markdown,
        judge_markdown,
        main_markdown,
        read_csv,
    )
    from halubench_data import atomic_write_text

    rows = read_csv(folder / "main.csv")
    atomic_write_text(folder / "main_table.md", main_markdown(rows), overwrite=True)
    plot_auroc_bars(folder / "detection_auroc_bars.png", rows, DATASET_NAMES)
    extract, cost = (json.loads((folder / f).read_text()) for f in ("extract.json", "cost.json"))
    atomic_write_text(folder / "cost.md", cost_markdown(cost, extract), overwrite=True)
    judge = json.loads((folder / "judge.json").read_text())
    atomic_write_text(folder / "judge_selection.md", judge_markdown(judge), overwrite=True)


if __name__ == "__main__":
    rebuild(Path(sys.argv[1]))
