"""Packages depend one way: kernels <- hf <- halluprobe; data and judges never import the kernels.

halluprobe may import halujudge in one place only: ``halluprobe transfer --judge`` (the optional extra
``halluprobe[judge]``); halujudge never imports halluprobe, so the arrow still points one way.

The check reads every module's imports with ``ast`` (nothing is imported), so it also catches imports inside
functions. A synthetic tree checks that the checker itself reports a violation.
"""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIRST_PARTY = {"flashstats_kernels", "flashstats_hf", "halluprobe", "halujudge", "halubench_data"}
# module -> first-party modules it may import (itself always allowed)
ALLOWED = {
    "flashstats_kernels": set(),
    "flashstats_hf": {"flashstats_kernels"},
    "halluprobe": {"flashstats_hf", "flashstats_kernels", "halubench_data"},
    "halujudge": {"halubench_data"},
    "halubench_data": set(),
}
# module -> {first-party module: the files (relative to src) that may import it as an optional extra}
OPTIONAL = {"halluprobe": {"halujudge": {"halluprobe/pipeline/_judge.py"}}}
# third-party roots the kernels package may import: torch and triton only (numpy if ever needed)
KERNEL_THIRD_PARTY = {"torch", "triton", "numpy"}
DIST = {
    "flashstats_kernels": "flashstats-kernels",
    "flashstats_hf": "flashstats-hf",
    "halluprobe": "halluprobe",
    "halujudge": "halujudge",
    "halubench_data": "halubench-data",
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def violations(src_root: Path, module: str) -> list[str]:
    found = []
    for path in sorted((src_root / module).rglob("*.py")):
        roots = imported_roots(path)
        rel = path.relative_to(src_root)
        for bad in sorted((roots & FIRST_PARTY) - ALLOWED[module] - {module}):
            if rel.as_posix() not in OPTIONAL.get(module, {}).get(bad, set()):
                found.append(f"{rel} imports {bad}")
        if module == "flashstats_kernels":
            third = roots - FIRST_PARTY - set(sys.stdlib_module_names) - {"__future__"}
            for bad in sorted(third - KERNEL_THIRD_PARTY):
                found.append(f"{path.relative_to(src_root)} imports third-party {bad}")
    return found


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_imports_point_one_way(module):
    src = ROOT / "packages" / DIST[module] / "src"
    assert (src / module / "__init__.py").exists()
    assert violations(src, module) == []


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_declared_sibling_dependencies_point_one_way(module):
    meta = tomllib.loads((ROOT / "packages" / DIST[module] / "pyproject.toml").read_text())
    deps = {
        d.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        for d in meta["project"]["dependencies"]
    }
    siblings = {m for m, dist in DIST.items() if dist in deps}
    assert siblings <= ALLOWED[module], f"{DIST[module]} declares {siblings - ALLOWED[module]}"


def test_checker_reports_a_backward_import(tmp_path):
    pkg = tmp_path / "halubench_data"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "leak.py").write_text("def f():\n    from flashstats_kernels import types\n    return types\n")
    assert violations(tmp_path, "halubench_data") == ["halubench_data/leak.py imports flashstats_kernels"]


def test_checker_reports_a_kernel_third_party_import(tmp_path):
    pkg = tmp_path / "flashstats_kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\nimport torch\nimport transformers\n")
    expected = ["flashstats_kernels/__init__.py imports third-party transformers"]
    assert violations(tmp_path, "flashstats_kernels") == expected


def private_cross_op_imports(ops_root: Path) -> list[str]:
    """``ops/<op>/*.py`` importing an underscore name of another op (shared helpers: ``ops/_*.py``)."""
    found = []
    for path in sorted(ops_root.glob("*/*.py")):
        own = path.parent.name
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            parts = node.module.split(".")
            if (
                parts[:2] != ["flashstats_kernels", "ops"]
                or len(parts) < 3
                or parts[2] in (own,)
                or parts[2][0] == "_"
            ):
                continue
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{path.relative_to(ops_root)} imports {node.module}.{alias.name}")
    return found


def test_no_op_imports_another_ops_private_names():
    ops_root = ROOT / "packages" / "flashstats-kernels" / "src" / "flashstats_kernels" / "ops"
    assert private_cross_op_imports(ops_root) == []


def test_checker_reports_a_private_cross_op_import(tmp_path):
    (tmp_path / "decode").mkdir()
    (tmp_path / "decode" / "fused.py").write_text(
        "from flashstats_kernels.ops._fused import lookup\n"
        "from flashstats_kernels.ops.decode.naive import _own\n"
        "from flashstats_kernels.ops.forward.fused import _fwd_range, forward_triton\n"
    )
    assert private_cross_op_imports(tmp_path) == [
        "decode/fused.py imports flashstats_kernels.ops.forward.fused._fwd_range"
    ]
