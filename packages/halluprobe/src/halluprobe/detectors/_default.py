"""The detector used when none is named: the general detector packaged with halluprobe.

``halluprobe.load()`` returns it; ``halluprobe.load(path)`` loads a saved detector folder. The packaged
one lives in the wheel as package data, ``halluprobe/packaged/general/`` (``detector.json`` and
``detector.safetensors``, the format of [`Detector.save`][halluprobe.Detector.save], integrity-checked
on load like any detector). ``halluprobe predict`` and ``halluprobe stream`` use it when no detector
folder is given.

The environment variable `ENV_VAR` (``HALLUPROBE_DETECTOR``), read each time a default is resolved
(never at import), names another folder to use as the default: a detector of your own, or one under
test.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in `load`: resolving the default path needs no torch
    pass

ENV_VAR = "HALLUPROBE_DETECTOR"
"""Environment variable naming a detector folder that replaces the packaged one as the default."""
PACKAGED = ("packaged", "general")
"""Where the packaged general detector lies inside the ``halluprobe`` package."""
BUILD_HINT = (
    "build one with `halluprobe train --general --dataset SPEC --dataset SPEC ... --out DIR` and pass "
    f"DIR/detector (or set {ENV_VAR}=DIR/detector)"
)


def packaged_path() -> Path:
    """The folder of the packaged general detector inside the installed package (it may be absent)."""
    return Path(str(resources.files("halluprobe").joinpath(*PACKAGED)))


def default_path() -> tuple[Path, str]:
    """The default detector's folder and how it was chosen (for a step message).

    Returns:
        ``(folder, description)``: `ENV_VAR`'s folder when it is set and not empty, else `packaged_path`.
    """
    override = os.environ.get(ENV_VAR, "")
    if override:
        return Path(override), f"{ENV_VAR}={override}"
    return packaged_path(), "the packaged general detector"


def load(path: str | os.PathLike[str] | None = None) -> Any:
    """A saved detector, or the default one (the packaged general detector) when ``path`` is None.

    A folder holds a probe [`Detector`][halluprobe.Detector] or a fine-tuned
    [`Reader`][halluprobe.Reader]; both predict, stream and serve alike.

    Args:
        path: A detector folder ([`Detector.save`][halluprobe.Detector.save]); None: the default
            (`default_path`).

    Raises:
        FileNotFoundError: ``path`` is None and no default detector exists (naming what is missing
            and how to build one), or ``path`` is missing.
        ValueError: the detector's files fail their checks ([`Detector.load`][halluprobe.Detector.load]).
    """
    if path is not None:
        return _load_folder(Path(path))
    return _load_folder(check_default())


def check_default() -> Path:
    """The default detector's folder once its ``detector.json`` is known to exist (no torch imported).

    Raises:
        FileNotFoundError: naming `ENV_VAR` when it names a folder without a detector, else saying how
            to build one.
    """
    folder, how = default_path()
    if not (folder / "detector.json").is_file():
        if how.startswith(ENV_VAR):
            raise FileNotFoundError(
                f"{how}: {folder / 'detector.json'} is missing: not a saved detector folder"
            )
        raise FileNotFoundError(
            f"this halluprobe has no packaged general detector ({'/'.join(('halluprobe', *PACKAGED))}/"
            f"detector.json is missing); {BUILD_HINT}"
        )
    return folder


KINDS: dict[str, str] = {"reader": "halluprobe.reader:Reader"}
"""Detector kinds besides the probe `Detector`: ``detector.json``'s ``"kind"`` -> ``"module:class"``, a
class with a ``load(folder)`` classmethod. Named, not imported: a kind lives in a layer above the
detectors (the fine-tuned reader builds on them), and is imported only when a folder of that kind loads."""


def _load_folder(folder: Path):
    """The detector in ``folder``: a probe [`Detector`][halluprobe.Detector], or the class of its kind.

    ``detector.json``'s ``"kind"`` names it (`KINDS`; a fine-tuned [`Reader`][halluprobe.Reader] says
    ``"reader"``); a probe detector's file has none.

    Raises:
        ValueError: an unknown kind (naming the file and the kinds this halluprobe reads).
    """
    import importlib

    from halluprobe.detectors._detector import Detector
    from halluprobe.detectors._detector_file import read_document

    doc = read_document(folder, "detector.json")
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind is None:
        return Detector.load(folder)
    if kind not in KINDS:
        raise ValueError(
            f"{folder / 'detector.json'} is a detector of kind {kind!r}; this halluprobe reads probe "
            f"detectors and the kinds {sorted(KINDS)}"
        )
    module, _, name = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name).load(folder)
