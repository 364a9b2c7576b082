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
- ``--json`` (every command with results has it, added by `add_json_arg` with its schema) prints one
  JSON document (``--json`` lines for a stream) on stdout via `emit` / `emit_json`, and nothing else:
  while the command runs, anything else printed to stdout goes to stderr. Every document's keys are
  checked against the command's documented schema before it is written.
- ``--no-progress`` hides progress bars but keeps step messages (`show_progress`); with it or
  ``--quiet``, a library's own bars (Transformers' GGUF conversion) are dropped from stderr too.
- A reader that closes the pipe early (``halubench-data stats x | head -1``) ends the command
  quietly with status 141 (128 + SIGPIPE, as a Unix tool killed by SIGPIPE), with no traceback.

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
import contextlib
import json
import math
import os
import select
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from importlib import metadata
from typing import Any, NoReturn

# the argument checks live in cliargs; commands reach them here (explicit re-exports)
from halubench_data.cliargs import (
    AUTO_LIMIT as AUTO_LIMIT,
    CACHE_NAMES as CACHE_NAMES,
    DATASET_HELP as DATASET_HELP,
    DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE,
    DEFAULT_LIMIT as DEFAULT_LIMIT,
    LIMIT_HELP as LIMIT_HELP,
    UsageError as UsageError,
    add_batch_size_arg as add_batch_size_arg,
    add_dataset_arg as add_dataset_arg,
    add_limit_arg as add_limit_arg,
    add_out_arg as add_out_arg,
    check_device_name as check_device_name,
    check_hub_id as check_hub_id,
    check_in_file as check_in_file,
    check_labels as check_labels,
    check_model_arg as check_model_arg,
    check_out_dir as check_out_dir,
    check_out_file as check_out_file,
    claim_out_dir as claim_out_dir,
    parse_limit as parse_limit,
    read_bounded as read_bounded,
    resolve_device as resolve_device,
    stale_outputs as stale_outputs,
    warn as warn,
)
from halubench_data.files import release_outputs

__all__ = [
    "warn",
    "add_out_arg",
    "add_limit_arg",
    "add_dataset_arg",
    "add_batch_size_arg",
    "DATASET_HELP",
    "AUTO_LIMIT",
    "CACHE_NAMES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LIMIT",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "INPUT_ERRORS",
    "LIMIT_HELP",
    "add_autotune_arg",
    "add_device_arg",
    "add_json_arg",
    "check_device_name",
    "check_hub_id",
    "check_in_file",
    "check_labels",
    "check_model_arg",
    "check_out_dir",
    "check_out_file",
    "claim_out_dir",
    "ConventionParser",
    "deterministic_kernels",
    "emit",
    "emit_json",
    "is_quiet",
    "json_ready",
    "JsonSchema",
    "loading_model",
    "make_parser",
    "one_line",
    "parse_limit",
    "quiet_transformers",
    "read_bounded",
    "resolve_device",
    "run",
    "show_progress",
    "stale_outputs",
    "status",
    "UsageError",
    "wants_json",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 128 + 13
"""The status when stdout's reader went away (128 + SIGPIPE, what a shell reports for ``yes | head``)."""
DEVICE_HELP = "torch device: auto (default: cuda when present, else cpu), cpu, cuda, cuda:N or mps"


INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # includes UsageError, UnicodeDecodeError and json.JSONDecodeError
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
"""Exceptions that a command raises for bad input; they end the command with exit 2."""

_STATE: dict[str, Any] = {"quiet": False, "progress": True, "json": False, "schema": None, "stdout": None}


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
        self.add_argument(
            "--no-progress", action="store_true", default=argparse.SUPPRESS,
            help="no progress bars on stderr (step messages stay; --quiet hides both)",
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


AUTOTUNE_HELP = (
    "autotune the attention kernels on CUDA (can be a little faster; results may then differ in the last "
    "bits from run to run). Default: torch.use_deterministic_algorithms(True), which fixes the kernels' "
    "tile sizes and cuBLAS's reductions, so a run on the same GPU and versions repeats bit for bit"
)


def add_autotune_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--autotune`` (off by default), to be passed to `deterministic_kernels`."""
    parser.add_argument("--autotune", action="store_true", help=AUTOTUNE_HELP)


def deterministic_kernels(device: str, autotune: bool = False) -> bool:
    """Make a CUDA run bitwise repeatable unless ``autotune``; returns whether it did.

    Calls ``torch.use_deterministic_algorithms(True, warn_only=True)`` (flashstats-kernels then runs
    each kernel's first tuning candidate instead of the fastest by timing, which may differ between
    processes and adds in another order) and sets ``CUBLAS_WORKSPACE_CONFIG`` when unset (cuBLAS needs
    it to reduce deterministically; call this before the first CUDA matmul). A process-wide setting:
    for the process of a CLI command. Nothing changes on other devices.
    """
    if autotune or not str(device).startswith("cuda"):
        return False
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    return True


@contextlib.contextmanager
def loading_model(flag: str, name: str) -> Iterator[None]:
    """Turn an error while loading the model that ``flag`` names into bad input (exit 2) naming it.

    Missing or unreadable weights (``OSError``, a ``ValueError`` from the loader, weights that torch
    refuses to unpickle) become ``ValueError("FLAG NAME: cannot load the model (Type: message)")``.
    Progress bars follow ``--quiet`` / ``--no-progress`` (`quiet_transformers`).
    """
    import pickle

    quiet_transformers()
    try:
        yield
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise ValueError(f"{flag} {name}: cannot load the model ({type(exc).__name__}: {exc})") from exc


def is_quiet() -> bool:
    """Whether ``--quiet`` was given (progress bars and step messages are off)."""
    return bool(_STATE["quiet"])


def show_progress() -> bool:
    """Whether a command may draw progress bars (on stderr): neither ``--quiet`` nor ``--no-progress``."""
    return not _STATE["quiet"] and bool(_STATE["progress"])


def quiet_transformers() -> None:
    """Turn Transformers' progress bars off when ours are (``--quiet``, ``--no-progress``).

    Its "Loading weights" bar goes, and with ``--quiet`` its info and warning messages too, and those of
    the Hugging Face hub client (a retry warning per second while a hub id is fetched without network).
    Call it before a model loads; nothing happens when Transformers is not installed.
    """
    if show_progress():
        return
    try:
        from huggingface_hub.utils import logging as hub_logging
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
    if is_quiet():
        hf_logging.set_verbosity_error()
        hub_logging.set_verbosity_error()


def status(message: str) -> None:
    """A progress or step message: to stderr, unless ``--quiet``."""
    if not _STATE["quiet"]:
        print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class JsonSchema:
    """The documented ``--json`` output of one command (rendered on the CLI page, checked on output)."""

    fields: Mapping[str, str]
    """Top-level key -> meaning, in the order the docs list them; a document has exactly these keys,
    a JSON line (an event of a stream) some of them."""
    lines: bool = False
    """True: JSON lines (one object per result, for a stream); False: one JSON document."""


def add_json_arg(parser: argparse.ArgumentParser, fields: Mapping[str, str], *, lines: bool = False) -> None:
    """Add ``--json`` to a command whose results follow ``fields`` (key -> meaning).

    The schema is kept as the parser's default ``json_schema`` (``parser.get_default("json_schema")``),
    which the docs render and `emit_json` checks every document against.
    """
    what = "one JSON object per line" if lines else "one JSON document"
    parser.add_argument(
        "--json", action="store_true",
        help=f"print the results as {what} on stdout (keys: {', '.join(fields)}); messages stay on stderr",
    )  # fmt: skip
    parser.set_defaults(json_schema=JsonSchema(dict(fields), lines))


def wants_json() -> bool:
    """Whether ``--json`` was given to the running command."""
    return bool(_STATE["json"])


def json_ready(obj: Any) -> Any:
    """``obj`` in plain JSON types.

    Dataclasses and mappings become objects, tuples and arrays lists, numpy and torch scalars numbers,
    paths strings, and NaN or infinite floats ``null``.
    """
    if is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple) or type(obj).__name__ == "ndarray":
        return [json_ready(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy or torch scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit_json(obj: Any) -> None:
    """Write one ``--json`` result to stdout: a document, or one line of a JSON-lines stream.

    ``obj`` goes through `json_ready` (NaN becomes ``null``, so readers get valid JSON). When the running
    command declared a schema (`add_json_arg`), a document must have exactly its keys, and a line of a
    JSON-lines stream (whose events differ) only keys that it documents.

    Raises:
        RuntimeError: the document's keys differ from the command's documented schema (a bug).
    """
    doc = json_ready(obj)
    schema: JsonSchema | None = _STATE["schema"]
    if schema is not None and isinstance(doc, dict):
        missing, extra = sorted(set(schema.fields) - set(doc)), sorted(set(doc) - set(schema.fields))
        if extra or (missing and not schema.lines):
            raise RuntimeError(
                f"--json output differs from its schema: missing {missing}, undocumented {extra}"
            )
    indent = None if schema is not None and schema.lines else 2
    out = _STATE["stdout"] or sys.stdout
    out.write(json.dumps(doc, allow_nan=False, ensure_ascii=False, indent=indent) + "\n")
    out.flush()


def emit(text: str | Callable[[], str], doc: Any | Callable[[], Any]) -> None:
    """A command's results: ``doc`` as JSON with ``--json``, else ``text`` for people (both on stdout).

    Either may be a function, called only when its form is wanted.
    """
    if wants_json():
        emit_json(doc() if callable(doc) else doc)
    else:
        print(text() if callable(text) else text, flush=True)


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
        (`INPUT_ERRORS`), 1 for any other exception, 130 for Ctrl-C, 141 when the reader of stdout
        went away (`EXIT_BROKEN_PIPE`; nothing is printed).
    """
    stdout = sys.stdout
    try:
        args, extra = parser.parse_known_args(argv)
    except BrokenPipeError:  # --help | head
        return _broken_pipe(stdout)
    if extra:  # reported by the command's parser, so the message names the command (`prog cmd: error:`)
        _command_parser(parser, getattr(args, dest, None)).error(f"unrecognized arguments: {' '.join(extra)}")
    debug = bool(getattr(args, "debug", False))
    name = getattr(args, dest, None) if isinstance(commands, Mapping) else None
    prog = f"{parser.prog} {name}" if name else parser.prog
    fn = commands[str(name)] if isinstance(commands, Mapping) else commands
    as_json = bool(getattr(args, "json", False))
    _STATE.update(
        quiet=bool(getattr(args, "quiet", False)), progress=not getattr(args, "no_progress", False),
        json=as_json, schema=getattr(args, "json_schema", None) if as_json else None, stdout=stdout,
    )  # fmt: skip
    try:
        with contextlib.ExitStack() as streams:
            if not show_progress():  # a library's own bar (Transformers' GGUF conversion) is hidden too
                streams.enter_context(contextlib.redirect_stderr(_WithoutBars(sys.stderr)))
            if as_json:  # stdout carries the document alone: anything else printed goes to stderr
                streams.enter_context(contextlib.redirect_stdout(sys.stderr))
            code = fn(args)
        stdout.flush()  # inside the try: a reader that went away shows up here
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if _reader_gone(stdout):
            return _broken_pipe(stdout)
        return _report(prog, exc, EXIT_FAILURE, debug)
    except INPUT_ERRORS as exc:
        return _report(prog, exc, EXIT_USAGE, debug)
    except Exception as exc:  # noqa: BLE001 - the convention: one line, traceback with --debug
        return _report(prog, exc, EXIT_FAILURE, debug)
    finally:
        _STATE.update(quiet=False, progress=True, json=False, schema=None, stdout=None)
        release_outputs()  # the files of a claimed --out folder that no atomic write listed
    return EXIT_OK if code is None else int(code)


def _command_parser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    """The subparser of the command ``name`` (``parser`` itself for a CLI without commands)."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:  # noqa: SLF001
            return action.choices[name]
    return parser


class _WithoutBars:
    r"""A text stream that drops progress-bar frames and passes everything else on to ``stream``.

    tqdm draws each frame as a write that starts with a carriage return (``"\r 40%|####  |"``), or
    moves the cursor up (``"\x1b[A"``) for a nested bar, and ends the bar with a lone newline; a
    library's bar cannot be switched off from outside, so with ``--quiet`` or ``--no-progress`` `run`
    sends stderr through this filter. Messages and warnings pass unchanged.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._in_bar = False

    def write(self, text: str) -> int:
        if text.startswith(("\r", "\x1b[A")) or (self._in_bar and not text.strip()):
            self._in_bar = True
            return len(text)
        self._in_bar = False
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self._stream, name)


def _reader_gone(stream: Any) -> bool:
    """Whether the pipe behind ``stream`` lost its reader (poll reports an error on the write end).

    A stream without a file descriptor cannot be checked and counts as gone: the exception was raised
    while writing results.
    """
    try:
        fd = stream.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):
        return True
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def _broken_pipe(stream: Any) -> int:
    """End quietly after the reader of stdout went away (as ``yes | head`` does)."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        # the interpreter flushes stdout at exit; point it at /dev/null so that flush cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def _report(prog: str, exc: BaseException, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    text = one_line(exc) or type(exc).__name__
    if code == EXIT_FAILURE:
        text = f"{type(exc).__name__}: {text}" + ("" if debug else " (rerun with --debug for the traceback)")
    print(f"{prog}: error: {text}", file=sys.stderr)
    return code
