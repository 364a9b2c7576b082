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
