"""Write docs/results/detection.md (and its two figures) from benchmarks/results/detection/.

The page renders the results folder (halluprobe's evaluation); the figures are the run's own PNGs.
Run from the repository root after a detection run: ``uv run python docs/scripts/detection_page.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from halluprobe.evaluation._results_page import render

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "detection"
PAGE = ROOT / "docs" / "results" / "detection.md"
FIGURES = {
    "detection_auroc_bars.png": "detection_auroc_bars.png",
    "detection_roc.png": "detection_roc_grid.png",
}

if __name__ == "__main__":
    PAGE.write_text(render(RESULTS))
    for src, dst in FIGURES.items():
        shutil.copyfile(RESULTS / src, PAGE.parent / "img" / dst)
    print(f"wrote {PAGE.relative_to(ROOT)}")
