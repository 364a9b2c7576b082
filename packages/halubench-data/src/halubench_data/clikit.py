"""The command-line convention shared by ``halluprobe``, ``halujudge`` and ``halubench-data``.

Every command of every CLI follows it; new commands get it by building their parser here:

- **Exit status**: ``0`` success; ``1`` a failure while running (a bug, a model that crashed, a full
  disk); ``2`` a usage error or bad input (a wrong or missing argument, a missing, malformed or
  unreadable file, a device that is not there). ``130`` after Ctrl-C.
- **Errors** are one line on stderr, ``prog: error: message``, naming the argument (``--device``)
  or the file and line (``data.jsonl:12``). No traceback unless ``--debug`` is given (then the
  traceback and the same exit status).
- **Streams**: results (tables, paths written, ``--json`` documents) go to stdout; progress bars and
  step messages go to stderr through `status`; ``--quiet`` silences them (never errors).
- ``--version`` prints ``prog X.Y.Z``; ``--quiet`` and ``--debug`` are accepted before or after the
  command name.
- **Device**: ``--device`` defaults to ``auto`` (``cuda`` when a CUDA device is present, else ``cpu``);
  ``cpu``, ``cuda``, ``cuda:N`` and ``mps`` are accepted when present. A missing accelerator or an
  unknown name is a usage error (exit 2) naming ``--device``.
- ``--json`` (where a command offers it) prints one JSON document on stdout via `emit_json`.

How a CLI follows it:

```python
parser = clikit.make_parser("halluprobe", "what it does", dist="halluprobe")
sub = parser.add_subparsers(dest="command", required=True)
p = sub.add_parser("predict", help="...")   # gets --quiet/--debug and one-line errors
clikit.add_device_arg(p)

def main(argv=None):
    return clikit.run(parser, {"predict": cmd_predict}, argv)
```

A command raises `UsageError` (or ``ValueError``, ``FileNotFoundError`` and the other
input errors in `INPUT_ERRORS`) for bad input, and returns ``0`` (or ``None``) on success.
This module imports nothing heavy; `resolve_device` imports torch when called.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "INPUT_ERRORS",
    "ConventionParser",
    "UsageError",
    "add_device_arg",
    "check_out_dir",
    "emit_json",
    "is_quiet",
    "make_parser",
    "one_line",
    "resolve_device",
    "run",
    "status",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
DEVICE_HELP = "torch device: auto (default: cuda when present, else cpu), cpu, cuda, cuda:N or mps"


class UsageError(ValueError):
    """Bad input from the user (exit 2); the message names the argument or ``file:line``."""


INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # includes UsageError, UnicodeDecodeError and json.JSONDecodeError
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
"""Exceptions that a command raises for bad input; they end the command with exit 2."""

_STATE = {"quiet": False}


class ConventionParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with ``--quiet``/``--debug`` on every (sub)command and one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # SUPPRESS: a flag given before the command is not reset by the subcommand's default.
        self.add_argument(
            "--quiet", action="store_true", default=argparse.SUPPRESS,
            help="no progress or step messages on stderr (errors are still printed)",
        )  # fmt: skip
        self.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS,
            help="print the traceback of an error (exit status unchanged)",
        )  # fmt: skip

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` as one line and exit 2 (argparse prints the usage too)."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def make_parser(prog: str, description: str, *, dist: str) -> ConventionParser:
    """The top-level parser of a CLI: ``--version`` (of the installed ``dist``), ``--quiet``, ``--debug``."""
    parser = ConventionParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} {_version(dist)}")
    return parser


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default ``auto``), to be checked with `resolve_device`."""
    parser.add_argument("--device", default="auto", metavar="DEVICE", help=DEVICE_HELP)


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


def check_out_dir(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``path`` as an output folder that exists or can be created and is writable, or `UsageError`.

    Nothing is created here: a command that fails later leaves no empty folder behind.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file; expected a folder")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag} {path}: {probe} is a file, so the folder cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: {probe} is not writable")
    return path


def is_quiet() -> bool:
    """Whether ``--quiet`` was given (progress bars should be disabled)."""
    return _STATE["quiet"]


def status(message: str) -> None:
    """A progress or step message: to stderr, unless ``--quiet``."""
    if not _STATE["quiet"]:
        print(message, file=sys.stderr, flush=True)


def emit_json(obj: Any) -> None:
    """A ``--json`` result: one JSON document on stdout (NaN refused, so readers get valid JSON)."""
    print(json.dumps(obj, allow_nan=False, ensure_ascii=False, indent=2))


def one_line(message: object) -> str:
    """``message`` with its line breaks folded into spaces."""
    return " ".join(str(message).split())


Command = Callable[[argparse.Namespace], "int | None"]


def run(
    parser: argparse.ArgumentParser,
    commands: Mapping[str, Command] | Command,
    argv: Sequence[str] | None = None,
    *,
    dest: str = "command",
) -> int:
    """Parse ``argv``, run the chosen command and map its outcome to the exit status.

    Args:
        parser: the CLI's parser (from `make_parser`).
        commands: command name -> function, or one function for a CLI without subcommands.
        argv: the arguments (default ``sys.argv[1:]``).
        dest: the ``add_subparsers(dest=...)`` that names the command.

    Returns:
        The exit status: the command's return value (``None`` -> 0), 2 for an input error
        (`INPUT_ERRORS`), 1 for any other exception, 130 for Ctrl-C.
    """
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    _STATE["quiet"] = bool(getattr(args, "quiet", False))
    name = getattr(args, dest, None) if isinstance(commands, Mapping) else None
    prog = f"{parser.prog} {name}" if name else parser.prog
    fn = commands[str(name)] if isinstance(commands, Mapping) else commands
    try:
        code = fn(args)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except INPUT_ERRORS as exc:
        return _report(prog, exc, EXIT_USAGE, debug)
    except Exception as exc:  # noqa: BLE001 - the convention: one line, traceback with --debug
        return _report(prog, exc, EXIT_FAILURE, debug)
    finally:
        _STATE["quiet"] = False
    return EXIT_OK if code is None else int(code)


def _report(prog: str, exc: BaseException, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    text = one_line(exc) or type(exc).__name__
    if code == EXIT_FAILURE:
        text = f"{type(exc).__name__}: {text}" + ("" if debug else " (rerun with --debug for the traceback)")
    print(f"{prog}: error: {text}", file=sys.stderr)
    return code
