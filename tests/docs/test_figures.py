"""The docs' drawn figures are what the scripts in docs/scripts produce from the repository's own files.

A diagram or a re-laid figure edited by hand, or a script changed without re-running it, fails here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(
        f"docs_scripts_{name}", ROOT / "docs" / "scripts" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["response_block.svg", "passes.svg"])
def test_committed_diagram_is_what_the_script_draws(name):
    diagrams = load_script("diagrams")
    drawn = diagrams.DIAGRAMS[name]()
    assert "<svg" in drawn and "Date" not in drawn
    assert (ROOT / "docs" / "img" / name).read_text() == drawn, f"re-run docs/scripts/diagrams.py for {name}"


def test_panel_bounds_cut_in_the_gaps():
    roc_grid = load_script("roc_grid")
    ink = np.ones(400, dtype=bool)
    ink[:20] = False  # margin before the y label: no cut there
    ink[150:170] = False  # a gap between two panels
    ink[300:305] = False  # too narrow to be a gap
    assert roc_grid.panel_bounds(ink) == [(0, 160), (160, 400)]


def test_committed_roc_grid_is_the_run_figure_restacked():
    roc_grid = load_script("roc_grid")
    source = Image.open(roc_grid.SOURCE)
    expected = np.asarray(roc_grid.grid(source))
    committed = np.asarray(Image.open(roc_grid.TARGET).convert("RGB"))
    assert committed.shape == expected.shape and np.array_equal(committed, expected)
    assert committed.shape[1] < source.width / 2  # two panels per row, not five
