"""halluprobe's layout: no import circle between its modules, small modules, lazy subpackages, old paths.

The import graph is read with ``ast`` (nothing is imported), so imports inside functions and under
``TYPE_CHECKING`` count as arrows too. A synthetic tree checks that the checker reports a circle.
"""

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import halluprobe
import pytest
from halluprobe import _lazy

SRC = Path(halluprobe.__file__).resolve().parent
MAX_LINES = 400
# over MAX_LINES, each to be split into smaller private modules; no module may join this list
TOO_LONG: dict[str, int] = {}
SUBPACKAGES = (
    "blocks",
    "cli",
    "detectors",
    "evaluation",
    "features",
    "localisation",
    "pipeline",
    "reader",
    "training",
)
LAYERS = (
    "base", "features", "blocks", "training", "localisation", "detectors", "evaluation", "reader", "pipeline",
    "serving", "cli",
)  # fmt: skip
"""halluprobe's layers, bottom first: a module imports only from its own layer or the ones below (the
private flat modules ``_numeric``, ``_lazy``, ... are ``base``; the package's own ``__init__`` re-exports
everything and stands above all)."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` for every ``.py`` under ``root``."""
    top = root.name
    modules = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        arrows = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import sub` names a module when pkg/sub.py exists
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            arrows.update(t for t in targets if t in modules and t.split(".")[0] == top and t != name)
        graph[name] = arrows
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_reports_a_circle_and_its_absence(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_a.py").write_text("def f():\n    from toy.sub._b import g\n")
    (pkg / "sub" / "_b.py").write_text("from . import _c\n")
    (pkg / "sub" / "_c.py").write_text("from toy.sub import _a\n")
    assert cycles(import_graph(pkg)) == [["toy.sub._a", "toy.sub._b", "toy.sub._c"]]
    (pkg / "sub" / "_c.py").write_text("import json\n")
    assert cycles(import_graph(pkg)) == []


def test_no_import_circle_between_halluprobe_modules():
    graph = import_graph(SRC)
    assert "halluprobe.features._token_data" in graph  # the walk found the tree
    assert cycles(graph) == []


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "top"
    return "base" if parts[1].startswith("_") else parts[1]


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Every import (module level, in a function or for type checking) from a lower layer to a higher one."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        if layer(a) != "top"
        for b in targets
        if layer(b) != "top" and rank[layer(b)] > rank[layer(a)]
    )


def test_the_layer_checker_reports_a_climb(tmp_path):
    pkg = tmp_path / "halluprobe"
    for sub in ("features", "cli"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from halluprobe import cli\n")  # the top re-exports: no climb
    (pkg / "features" / "_a.py").write_text("def f():\n    from halluprobe.cli import _b\n")
    (pkg / "cli" / "_b.py").write_text("from halluprobe.features import _a\n")
    assert climbs(import_graph(pkg)) == ["halluprobe.features._a -> halluprobe.cli._b"]


def test_no_import_climbs_back_up_a_layer():
    graph = import_graph(SRC)
    assert {layer(m) for m in graph} <= {*LAYERS, "top"}
    assert climbs(graph) == []


def test_modules_stay_small():
    lengths = {module_name(SRC, p): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in TOO_LONG}
    assert too_long == {}, f"split these modules (at most {MAX_LINES} lines each): {too_long}"
    # an allowed module may not grow, and leaves the list once it is split
    for name, n in TOO_LONG.items():
        assert lengths.get(name, 0) <= n, (name, lengths.get(name))
    assert all(lengths.get(name, 0) > MAX_LINES for name in TOO_LONG), "remove split modules from TOO_LONG"


def test_the_code_lives_in_subpackages():
    flat = sorted(p.stem for p in SRC.glob("*.py") if not p.stem.startswith("_"))
    assert flat == [], f"public flat modules: {flat}"
    for name in SUBPACKAGES:
        assert (SRC / name / "__init__.py").is_file()
        private = [p.stem for p in (SRC / name).glob("*.py") if p.stem != "__init__"]
        assert private and all(stem.startswith("_") for stem in private), (name, private)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_public_name_of_a_subpackage_resolves(name):
    package = importlib.import_module(f"halluprobe.{name}")
    for attr in package.__all__:
        value = getattr(package, attr)
        assert value is not None, (name, attr)
    with pytest.raises(AttributeError, match="no attribute"):
        _ = package.not_a_name


def test_top_level_names_are_the_subpackages_objects():
    from halluprobe.detectors import Detector
    from halluprobe.features import ProxyExtractor

    assert halluprobe.Detector is Detector and halluprobe.ProxyExtractor is ProxyExtractor
    for attr in halluprobe.__all__:
        assert getattr(halluprobe, attr) is not None


def test_subpackages_import_neither_torch_nor_sklearn():
    code = (
        "import sys\n"
        f"import {', '.join(f'halluprobe.{n}' for n in SUBPACKAGES)}\n"
        "heavy = [m for m in ('torch', 'sklearn', 'transformers', 'flashstats_hf') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_loading_a_saved_detector_imports_no_fitting_or_training_code():
    code = (
        "import sys\n"
        "from halluprobe.detectors._default import load, packaged_path\n"
        "if (packaged_path() / 'detector.json').is_file():\n"
        "    load(None)\n"
        "fitting = ('sklearn.decomposition', 'sklearn.linear_model', 'matplotlib', 'halluprobe.pipeline',\n"
        "           'halluprobe.training._general', 'halluprobe.evaluation')\n"
        "loaded = [m for m in fitting if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("old", sorted(_lazy.MOVED_MODULES))
def test_an_old_module_path_is_the_new_module_with_a_warning(old, monkeypatch):
    new = importlib.import_module(_lazy.MOVED_MODULES[old][0])
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, import from") as caught:
        module = importlib.import_module(old)
    assert module is new and sys.modules[old] is new
    assert new.__spec__.name == new.__name__  # the old name did not overwrite the module's own spec
    assert caught[0].filename == __file__ or "importlib" in caught[0].filename


def test_an_old_from_import_names_the_importing_line(monkeypatch):
    monkeypatch.delitem(sys.modules, "halluprobe.extract", raising=False)
    with pytest.warns(
        DeprecationWarning, match="halluprobe.extract is deprecated, import from halluprobe.features"
    ) as w:
        from halluprobe.extract import plan_batches  # noqa: PLC0415
    from halluprobe.features import plan_batches as new

    assert plan_batches is new
    assert w[0].filename == __file__


def test_a_name_of_an_old_flat_module_made_private_still_resolves_with_a_warning():
    import halluprobe.blocks
    from halluprobe.blocks._blocks import l9_matrix

    assert "l9_matrix" not in halluprobe.blocks.__all__
    with pytest.warns(DeprecationWarning, match="halluprobe.blocks.l9_matrix is deprecated"):
        assert halluprobe.blocks.l9_matrix is l9_matrix
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert halluprobe.blocks.A7Block is not None  # a public name: no warning
