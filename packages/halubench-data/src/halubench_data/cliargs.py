"""Checks of command-line arguments shared by the three CLIs: devices, input and output paths, limits, labels.

Each check runs before a command does its work (before a model or a dataset loads) and raises an error
that names the flag; `halubench_data.clikit` turns it into one line on stderr and exit 2. `clikit`
re-exports every name here, so commands reach them as ``clikit.check_in_file`` and so on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class UsageError(ValueError):
    """Bad input from the user (exit 2); the message names the argument or ``file:line``."""


def resolve_device(name: str | None, flag: str = "--device") -> str:
    """The torch device string for ``name``, or `UsageError` naming ``flag``.

    ``None``, ``""`` and ``"auto"`` give ``"cuda"`` when a CUDA device is available, else ``"cpu"``.

    Raises:
        UsageError: an unknown device name, a device type other than cpu/cuda/mps, or an
            accelerator (or device index) that this machine does not have.
    """
    import torch

    if name is None or name in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(
            f"{flag} {name!r} is not a device; expected auto, cpu, cuda, cuda:N or mps"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"{flag} {name}: no CUDA device is available on this machine; use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"{flag} {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(
                f"{flag} {name}: no MPS device is available on this machine; use --device cpu or auto"
            )
    elif dev.type != "cpu":
        raise UsageError(
            f"{flag} {name}: unsupported device type {dev.type!r}; expected auto, cpu, cuda or mps"
        )
    return str(dev)


def check_in_file(path: str | os.PathLike[str], flag: str) -> Path:
    """``path`` as an input file that exists, or an error naming ``flag`` (exit 2).

    Raises:
        FileNotFoundError: nothing is at ``path``.
        IsADirectoryError: ``path`` is a folder.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise IsADirectoryError(f"{flag} {path} is a folder; expected a file")
    if not path.exists():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    return path


def check_model_arg(name: str | None, flag: str) -> None:
    """`FileNotFoundError` naming ``flag`` when the model ``name`` is a local path that does not exist.

    A name counts as a path when it is absolute or starts with ``.`` or ``~``, has more than one ``/``
    or a weights-file suffix (``.gguf``, ``.safetensors``, ``.bin``); a hub id ``org/name`` or an
    alias (``smollm2``) is left to the loader. Checked before a model or dataset loads, so a typo
    fails at once.
    """
    if name is None or Path(name).expanduser().exists():
        return
    looks_like_path = (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or name.endswith((".gguf", ".safetensors", ".bin"))
    )
    if looks_like_path:
        raise FileNotFoundError(f"{flag} {name}: no such file or folder")


def check_out_dir(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``path`` as an output folder that exists or can be created and is writable, or `UsageError`.

    Nothing is created here: a command that fails later leaves no empty folder behind.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file; expected a folder")
    _check_creatable(path, path, flag)
    return path


def check_out_file(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``path`` as an output file whose folder exists or can be created and is writable, or `UsageError`.

    Checked before a command does its work; nothing is created here.
    """
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder; expected a file path")
    _check_creatable(path, path.parent, flag)
    return path


def _check_creatable(path: Path, folder: Path, flag: str) -> None:
    """`UsageError` unless ``folder`` exists or can be created under its nearest existing, writable parent."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag} {path}: {probe} is a file, so the folder cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: {probe} is not writable")


def parse_limit(text: str | None, flag: str = "--limit") -> int | None:
    """``--limit`` of the commands that read a dataset: examples per split (at least 2), ``None`` for all.

    Accepts a number or ``all`` (and ``None``, the option's absence); a split needs an example of each
    label, so fewer than 2 is refused.

    Raises:
        UsageError: naming ``flag``.
    """
    if text is None or text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} expects a number of examples per split or 'all', got {text!r}") from None
    if value < 2:
        raise UsageError(f"{flag} must be at least 2 examples per split (or 'all'), got {value}")
    return value


def check_labels(data: Any, flag: str, spec: str, needs: Mapping[str, Sequence[int]], command: str) -> None:
    """`UsageError` naming ``flag`` unless each split of ``needs`` holds each of its labels.

    Fitting, threshold choice and AUROC need supported (0) and hallucinated (1) answers: a command checks
    its dataset before a model loads, so an empty file or a one-label split fails at once and writes
    nothing.

    Args:
        data: a `halubench_data.Dataset`.
        flag: the option that named the dataset (``--dataset``, ``--select-on``).
        spec: the dataset spec as given.
        needs: ``{split: labels it must hold}``, e.g. ``{"test": (0, 1)}``.
        command: the command, for the message (``halluprobe train``).
    """
    for split, wanted in needs.items():
        labels = [int(y) for y in data.split(split).labels]
        if any(y not in labels for y in wanted):
            n1 = sum(labels)
            counts = f"{n1} hallucinated (1) and {len(labels) - n1} supported (0)" if labels else "0"
            what = "both labels" if len(wanted) == 2 else "a hallucinated (1) example"
            raise UsageError(
                f"{flag} {spec}: the {split} split has {counts} examples; {command} needs {what} in it"
            )
