"""The detection results page is generated from the committed results (no hand-written numbers)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_detection_page_is_the_rendering_of_the_results_folder():
    from halluprobe.results_page import render

    page = (ROOT / "docs" / "results" / "detection.md").read_text()
    fix = "run `uv run python docs/scripts/detection_page.py`"
    assert page == render(ROOT / "benchmarks" / "results" / "detection"), f"the page is out of date: {fix}"
