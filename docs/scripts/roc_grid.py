"""Re-lay the detection ROC figure (one row of panels) as a two-column grid that reads at page width.

The H200 run wrote ``benchmarks/results/detection/detection_roc.png`` with its five panels side by side
(2310 px wide: unreadable when scaled to a page). This script finds the white gaps between the panels,
cuts them apart without resampling and stacks them two per row into
``docs/results/img/detection_roc_grid.png``. Nothing is redrawn, so the curves are exactly the run's.
Run from the repository root: ``uv run python docs/scripts/roc_grid.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "benchmarks" / "results" / "detection" / "detection_roc.png"
TARGET = ROOT / "docs" / "results" / "img" / "detection_roc_grid.png"


def panel_bounds(ink: np.ndarray, min_gap: int = 10, skip: int = 100) -> list[tuple[int, int]]:
    """``[(x0, x1), ...]`` of the panels, cut in the middle of every white gap of ``min_gap`` px or more.

    Args:
        ink: ``[W] bool``: whether a pixel column holds anything but background.
        min_gap: narrowest gap between two panels.
        skip: leading columns (the y-axis label) where no cut is made.
    """
    cuts, start = [0], None
    for x, has_ink in enumerate(ink):
        if not has_ink and start is None:
            start = x
        elif has_ink and start is not None:
            if x - start >= min_gap and start > skip:
                cuts.append((start + x) // 2)
            start = None
    cuts.append(len(ink))
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def grid(image: Image.Image, columns: int = 2, gap: int = 24) -> Image.Image:
    """The panels of ``image`` laid out ``columns`` per row (``gap`` px apart) on a white page."""
    rgb = np.asarray(image.convert("RGB")).astype(int)
    panels = [
        image.crop((x0, 0, x1, image.height)) for x0, x1 in panel_bounds((rgb < 235).any(axis=2).any(axis=0))
    ]
    width = max(p.width for p in panels)
    rows = -(-len(panels) // columns)
    height = image.height + gap
    out = Image.new("RGB", (columns * width, rows * height), "white")
    for k, panel in enumerate(panels):
        out.paste(panel, ((k % columns) * width, (k // columns) * height + gap))
    return out


def main() -> None:
    """Write the grid figure next to the other result images of the docs."""
    grid(Image.open(SOURCE)).save(TARGET, optimize=True)


if __name__ == "__main__":
    main()
