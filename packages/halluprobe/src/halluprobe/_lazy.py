"""Lazy public names for halluprobe's subpackages, and the old flat module paths kept for one release.

A subpackage's ``__init__`` lists its public names once per private module; `attach` gives it the module
``__getattr__`` that imports that module on first use, so ``import halluprobe.features`` does not import
torch until a name that needs it is read. `install_moved_modules` keeps ``import halluprobe.extract``
(and every other flat path of 0.1) working: it returns the new module object and warns where it moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

# old flat module -> (its new private module, the public package users import from now)
MOVED_MODULES: dict[str, tuple[str, str]] = {
    "halluprobe.extract": ("halluprobe.features._extract", "halluprobe.features"),
    "halluprobe.cache": ("halluprobe.features._cache", "halluprobe.features"),
    "halluprobe.records": ("halluprobe.features._records", "halluprobe.features"),
    "halluprobe.distributed": ("halluprobe.features._distributed", "halluprobe.features"),
    "halluprobe.token_data": ("halluprobe.features._token_data", "halluprobe.features"),
    "halluprobe.toha": ("halluprobe.features._toha", "halluprobe.features"),
    "halluprobe.selection": ("halluprobe.blocks._selection", "halluprobe.blocks"),
    "halluprobe.induction": ("halluprobe.blocks._induction", "halluprobe.blocks"),
    "halluprobe.protocol": ("halluprobe.training._protocol", "halluprobe.training"),
    "halluprobe.detector": ("halluprobe.detectors._detector", "halluprobe.detectors"),
    "halluprobe.detector_file": ("halluprobe.detectors._detector_file", "halluprobe.detectors"),
    "halluprobe.streaming": ("halluprobe.detectors._streaming", "halluprobe.detectors"),
    "halluprobe.suite": ("halluprobe.evaluation._suite", "halluprobe.evaluation"),
    "halluprobe.tables": ("halluprobe.evaluation._tables", "halluprobe.evaluation"),
    "halluprobe.report": ("halluprobe.evaluation._report", "halluprobe.evaluation"),
    "halluprobe.results_page": ("halluprobe.evaluation._results_page", "halluprobe.evaluation"),
    "halluprobe.spans": ("halluprobe.localisation._spans", "halluprobe.localisation"),
    "halluprobe.numeric": ("halluprobe._numeric", "scipy.special (expit)"),
    "halluprobe._cli_inputs": ("halluprobe.cli._inputs", "halluprobe.cli"),
    "halluprobe._cli_schemas": ("halluprobe.cli._schemas", "halluprobe.cli"),
    "halluprobe._cli_stream": ("halluprobe.cli._stream", "halluprobe.cli"),
}


def moved_message(old: str) -> str:
    """The deprecation message of an old flat module path."""
    return f"{old} is deprecated, import from {MOVED_MODULES[old][1]}"


class _MovedLoader(importlib.abc.Loader):
    """Loads an old path as the new module object itself (one module, two names), with a warning."""

    def __init__(self, old: str) -> None:
        self.old = old
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED_MODULES[self.old][0])
        self.spec = module.__spec__
        # stacklevel 2: the import machinery's frames are skipped, so this names the importing line
        warnings.warn(moved_message(self.old), DeprecationWarning, stacklevel=2)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the old name's spec on the module: give it back its own
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(fullname))


def install_moved_modules() -> None:
    """Put the finder of the old flat module paths on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())


def attach(
    package: str, exports: Mapping[str, Sequence[str]], legacy: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a subpackage whose public names are imported lazily.

    Args:
        package: The subpackage's ``__name__``.
        exports: ``{private module: public names it defines}``.
        legacy: The private module that was the flat module of the same name in 0.1 (``"_blocks"`` for
            ``halluprobe.blocks``): its other names still resolve, with a DeprecationWarning.

    Returns:
        ``(__getattr__, __dir__)`` for the subpackage's namespace.
    """
    if any(isinstance(names, str) for names in exports.values()):
        raise TypeError(f"{package}: exports maps a module to a sequence of names, not to one string")
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        if legacy is not None and not name.startswith("__"):
            old = importlib.import_module(f"{package}.{legacy}")
            if hasattr(old, name):
                warnings.warn(
                    f"{package}.{name} is deprecated: it is private to halluprobe now",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(old, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
