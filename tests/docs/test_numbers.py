"""The home page and the packaged-detector page are rendered from results files, figure by figure."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "regenerate with `uv run python docs/scripts/page_numbers.py` (edit docs/scripts/templates/)"


def _script():
    spec = importlib.util.spec_from_file_location(
        "docs_numbers", ROOT / "docs" / "scripts" / "page_numbers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


numbers = _script()


@pytest.mark.parametrize("name", sorted(numbers.PAGES))
def test_each_page_is_its_rendering_from_the_results(name):
    assert numbers.PAGES[name].read_text(encoding="utf-8") == numbers.page(name), FIX


def _prose(template: str) -> str:
    """The template without code, comments, links, generated blocks and placeholders."""
    text = re.sub(r"```.*?```", "", template, flags=re.S)
    text = re.sub(r"<!-- transfer-table:start -->.*?<!-- transfer-table:end -->", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"\{\{\w+\}\}", "", text)


ALLOWED = {"0.05"}  # the "within 0.05 of the best F1" criterion of the transfer table, a definition
FIGURE = re.compile(r"(?<![\w.\-/])[−+-]?\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")


@pytest.mark.parametrize("name", sorted(numbers.PAGES))
def test_no_template_types_a_figure_by_hand(name):
    prose = _prose((numbers.TEMPLATES / f"{name}.md.tmpl").read_text(encoding="utf-8"))
    figures = [m.group(0) for m in FIGURE.finditer(prose)]
    typed = [f for f in figures if f not in ALLOWED and not re.fullmatch(r"\d", f)]
    assert typed == [], f"put these through a placeholder of docs/scripts/page_numbers.py: {typed}"


def test_the_headline_is_the_packaged_detectors_recorded_mean(tmp_path):
    run = json.loads((numbers.RESULTS / "general_detector_training.json").read_text())
    mean = run["mean_loso_auroc"][run["candidate"]]
    values = numbers.facts()
    assert values["mean_auroc"] == f"{mean:.3f}" and values["candidate"] == run["candidate"]
    assert f"| {values['mean_auroc']}, against {values['floor_auroc']}" in numbers.PAGES["index"].read_text()
    stale = numbers.page("index", {**values, "mean_auroc": "0.727"})
    assert stale != numbers.PAGES["index"].read_text()  # a stale figure is a difference the first test sees
    with pytest.raises(KeyError, match="no value for"):
        numbers.render("{{nosuch}}", values)
