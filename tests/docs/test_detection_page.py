"""The detection results page is generated from the committed results (no hand-written numbers)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_detection_page_is_the_rendering_of_the_results_folder():
    from halluprobe.evaluation._results_page import render

    page = (ROOT / "docs" / "results" / "detection.md").read_text()
    fix = "run `uv run python docs/scripts/detection_page.py`"
    assert page == render(ROOT / "benchmarks" / "results" / "detection"), f"the page is out of date: {fix}"


def test_docs_figures_are_the_runs_own_pngs():
    """The page's figures are byte copies of the run's (``plot_roc_grid`` lays out the panels two per row)."""
    import importlib.util

    from PIL import Image

    spec = importlib.util.spec_from_file_location(
        "detection_page", ROOT / "docs" / "scripts" / "detection_page.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for src, dst in script.FIGURES.items():
        run = (script.RESULTS / src).read_bytes()
        assert (ROOT / "docs" / "results" / "img" / dst).read_bytes() == run, (
            f"copy {src} again: run the script"
        )
    with Image.open(script.RESULTS / "detection_roc.png") as roc:
        width, height = roc.size
    assert width < 2 * height, "the ROC figure should be a grid that reads at page width, not one row"
