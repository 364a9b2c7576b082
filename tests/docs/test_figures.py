"""The docs' drawn figures are what the scripts in docs/scripts produce from the repository's own files.

A diagram or a re-laid figure edited by hand, or a script changed without re-running it, fails here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("name", ["streaming_cost.png", "families_cost.png", "detector_transfer.png"])
def test_committed_result_plot_is_what_the_script_draws(name):
    """Pixels, not bytes: the PNG encoder's output may differ between zlib builds, the image may not."""
    import io

    import numpy as np
    from PIL import Image

    plots = load_script("result_plots")
    plots._style()
    drawn = np.asarray(Image.open(io.BytesIO(plots.FIGURES[name]())).convert("RGB"), dtype=np.int16)
    committed = np.asarray(
        Image.open(ROOT / "docs" / "results" / "img" / name).convert("RGB"), dtype=np.int16
    )
    fix = f"re-run docs/scripts/result_plots.py for {name}"
    assert drawn.shape == committed.shape, fix
    assert (np.abs(drawn - committed).max(axis=-1) > 8).mean() < 0.002, fix


def test_result_plots_read_the_committed_results():
    plots = load_script("result_plots")
    floor, auroc, chosen = plots.transfer_values()
    assert len(floor) == 9 and set(auroc[chosen]) == set(floor)
    decode = plots.streaming_values()[("llama3-8b", "decode", 32768)]
    assert {"splitk", "stats", "sdpa"} <= set(decode)
    families = plots.families_points()
    assert len(families) == 7 and all(2048 in by_length for by_length in families.values())
