"""Scripts run as ``python docs/scripts/NAME.py`` put their folder first on ``sys.path``: a script named
like a standard-library module would shadow that module for every import of the run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_docs_or_benchmark_script_shadows_a_standard_library_module():
    folders = [ROOT / "docs" / "scripts", ROOT / "benchmarks"]
    shadowing = [
        str(p.relative_to(ROOT))
        for folder in folders
        for p in folder.glob("*.py")
        if p.stem in sys.stdlib_module_names
    ]
    assert shadowing == [], f"rename these scripts (they shadow standard-library modules): {shadowing}"
