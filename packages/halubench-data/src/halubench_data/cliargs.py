"""The arguments shared by the three CLIs and their checks: devices, input and output paths, limits, labels.

Each check runs before a command does its work (before a model or a dataset loads) and raises an error
that names the flag; `halubench_data.clikit` turns it into one line on stderr and exit 2. `clikit`
re-exports every name here, so commands reach them as ``clikit.check_in_file`` and so on.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class UsageError(ValueError):
    """Bad input from the user (exit 2); the message names the argument or ``file:line``."""


DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
_DEVICE_SYNTAX = re.compile(r"(auto|cpu|mps|cuda(:[0-9]+)?)")


def check_device_name(name: str | None, flag: str = "--device") -> None:
    """`UsageError` naming ``flag`` unless ``name`` reads as a device (checked without importing torch).

    ``None`` (the option's absence) is ``auto``; an empty string is refused.
    """
    if name is not None and not _DEVICE_SYNTAX.fullmatch(name):
        raise UsageError(f"{flag} {name!r} is not a device; expected {DEVICE_NAMES}")


def resolve_device(name: str | None, flag: str = "--device") -> str:
    """The torch device string for ``name``, or `UsageError` naming ``flag``.

    ``None`` and ``"auto"`` give ``"cuda"`` when a CUDA device is available, else ``"cpu"``. The
    name is checked (`check_device_name`) before torch is imported.

    Raises:
        UsageError: an empty or unknown device name, or an accelerator (or device index) that this
            machine does not have.
    """
    check_device_name(name, flag)
    import torch

    if name is None or name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"{flag} {name}: no CUDA device is available on this machine; use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"{flag} {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            f"{flag} {name}: no MPS device is available on this machine; use --device cpu or auto"
        )
    return str(dev)


def check_in_file(path: str | os.PathLike[str], flag: str) -> Path:
    """``path`` as an input file that exists and is a regular file, or an error naming ``flag`` (exit 2).

    A device, FIFO or socket (``/dev/zero``, ``/dev/stdin``) is refused: it can be endless.

    Raises:
        FileNotFoundError: nothing is at ``path``.
        IsADirectoryError: ``path`` is a folder.
        UsageError: ``path`` is empty or not a regular file.
    """
    if not str(path).strip():
        raise UsageError(f"{flag} is empty; expected a file")
    path = Path(path).expanduser()
    if path.is_dir():
        raise IsADirectoryError(f"{flag} {path} is a folder; expected a file")
    if not path.exists():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    if not path.is_file():
        raise UsageError(f"{flag} {path} is not a regular file (a device, FIFO or socket); expected a file")
    return path


MAX_INPUT_BYTES = 1 << 30
"""Largest input file a CLI reads whole or line by line (a JSONL of answers, a selection file)."""


def read_bounded(path: str | os.PathLike[str], flag: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (`check_in_file`), refused when over ``limit`` bytes.

    Raises:
        UsageError: naming ``flag``, the file is larger than ``limit``; and the errors of `check_in_file`.
    """
    path = check_in_file(path, flag)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{flag} {path} is larger than {limit} bytes; expected a smaller file")
    return data


def check_model_arg(name: str | None, flag: str, aliases: Sequence[str] = ()) -> None:
    """An error naming ``flag`` when the model ``name`` cannot be what the loader needs.

    A name counts as a path when it is absolute or starts with ``.`` or ``~``, has more than one ``/``
    or a weights-file suffix (``.gguf``, ``.safetensors``, ``.bin``): it must exist. One of ``aliases``
    (``smollm2``) is left to the loader. Any other name is a hub id (``org/name``, or a bare ``name``):
    it must be in the local Hugging Face cache, or the hub must answer (`check_hub_id`). Checked before
    a model or dataset loads (and before torch is imported), so a typo or a missing network fails at
    once, in one line, rather than after the hub client's retries.

    Raises:
        UsageError: an empty name, or a hub id that is neither cached nor reachable.
        FileNotFoundError: a path that does not exist.
    """
    if name is None:
        return
    if not name.strip():
        raise UsageError(f"{flag} is empty; expected a hub id, a local folder or a .gguf file")
    if Path(name).expanduser().exists():
        return
    looks_like_path = (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or name.endswith((".gguf", ".safetensors", ".bin"))
    )
    if looks_like_path:
        raise FileNotFoundError(f"{flag} {name}: no such file or folder")
    if name not in aliases:
        check_hub_id(name, flag)


def check_hub_id(repo_id: str, flag: str) -> None:
    """`UsageError` naming ``flag`` unless the hub model ``repo_id`` can be loaded without waiting.

    A snapshot in the local Hugging Face cache passes (``local_files_only``). Otherwise the hub is asked
    once with a short timeout; an offline install (``HF_HUB_OFFLINE=1``) or no connection fails at
    once, instead of the loader's retries. Imports only ``huggingface_hub``.
    """
    import huggingface_hub
    from huggingface_hub import constants

    try:
        huggingface_hub.snapshot_download(repo_id, local_files_only=True)
        return
    except (OSError, ValueError):  # LocalEntryNotFoundError, or an id the hub client rejects
        pass
    advice = "download it where there is network (`hf download ID`) or pass a local folder"
    if constants.HF_HUB_OFFLINE:
        raise UsageError(
            f"{flag} {repo_id}: not in the local Hugging Face cache and this install is offline "
            f"(HF_HUB_OFFLINE is set); {advice}"
        )
    try:
        huggingface_hub.model_info(repo_id, timeout=10)
    except Exception as exc:  # noqa: BLE001 - httpx transport errors, hub HTTP errors
        if type(exc).__name__ in ("RepositoryNotFoundError", "GatedRepoError", "HfHubHTTPError"):
            raise UsageError(f"{flag} {repo_id}: the hub has no such model, or it is gated ({exc})") from None
        raise UsageError(
            f"{flag} {repo_id}: not in the local Hugging Face cache and the hub cannot be reached "
            f"(offline install? {type(exc).__name__}); {advice}"
        ) from None


CACHE_NAMES = frozenset({"cache", "cache.jsonl"})
"""Entries of an output folder that are resumable caches, kept and reused by a rerun (never stale:
halluprobe's feature cache and halujudge's score cache are keyed by their inputs)."""


def check_out_dir(
    path: str | os.PathLike[str], flag: str = "--out", *, overwrite: bool | None = None
) -> Path:
    """``path`` as an output folder that exists or can be created and is writable, or `UsageError`.

    With ``overwrite`` given (``False`` or ``True``), the folder's contents are checked too: without
    ``overwrite``, a folder that holds anything besides its caches (`CACHE_NAMES`) is refused, naming
    the outputs of earlier runs (the files its manifest lists, `halubench_data.files.OUTPUTS_MANIFEST`)
    apart from the files no run wrote. `claim_out_dir` then removes the earlier outputs and nothing
    else. Writability is tried (a temporary folder is created and removed), so ``/proc/x`` or a
    read-only mount fails here, not after the work. Nothing else is created: a command that fails
    later leaves no empty folder behind.
    """
    if not str(path).strip():
        raise UsageError(f"{flag} is empty; expected a folder")
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file; expected a folder")
    _check_creatable(path, path, flag)
    if overwrite is False and stale_outputs(path):
        ours, others = _outputs_and_others(path)
        parts = []
        if ours:
            parts.append(f"the outputs of an earlier run ({_few(ours)})")
        if others:
            parts.append(f"files that no run of these tools wrote ({_few(others)}; --overwrite keeps them)")
        raise UsageError(
            f"{flag} {path} holds {' and '.join(parts)}; pass --overwrite to replace the outputs of earlier "
            "runs, or choose another folder"
        )
    return path


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _outputs_and_others(path: Path) -> tuple[list[str], list[str]]:
    """Files under ``path`` that earlier runs listed, and the others (caches aside; sorted)."""
    from halubench_data.files import _files_under, listed_outputs

    files = _files_under(path, CACHE_NAMES)
    listed = listed_outputs(path)
    return sorted(files & listed), sorted(files - listed)


def stale_outputs(path: Path) -> list[str]:
    """Names in the output folder ``path`` other than its caches and manifest (sorted; empty when none)."""
    from halubench_data.files import OUTPUTS_MANIFEST

    skip = CACHE_NAMES | {OUTPUTS_MANIFEST}
    return sorted(p.name for p in path.iterdir() if p.name not in skip) if path.is_dir() else []


def claim_out_dir(path: str | os.PathLike[str], *, overwrite: bool) -> list[str]:
    """Start a command's writes to its output folder, after its arguments are checked.

    With ``overwrite``, the files that earlier runs wrote (listed in the folder's manifest) are
    removed, caches (`CACHE_NAMES`) and files that no run wrote are kept. Every file the command
    then writes through `halubench_data.files.atomic_path` is listed in the manifest, so the next
    ``--overwrite`` removes it; `run` stops the listing when the command ends. Returns the removed
    paths (relative).
    """
    from halubench_data.files import claim_outputs

    return claim_outputs(path, remove_earlier=overwrite, kept=CACHE_NAMES)


def check_out_file(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``path`` as an output file whose folder exists or can be created and is writable, or `UsageError`.

    Checked before a command does its work; nothing is created here.
    """
    if not str(path).strip():
        raise UsageError(f"{flag} is empty; expected a file path")
    path = Path(path).expanduser()
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder; expected a file path")
    _check_creatable(path, path.parent, flag)
    return path


def _check_creatable(path: Path, folder: Path, flag: str) -> None:
    """`UsageError` unless ``folder`` exists or can be created under its nearest existing, writable parent."""
    probe = folder.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag} {path}: {probe} is a file, so the folder cannot be created")
    try:  # os.access says yes to root on read-only mounts and in /proc: try it
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".write-check-"))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {probe} is not writable ({exc.strerror})") from None


DEFAULT_LIMIT = "auto"
"""``--limit`` when not given, in every CLI."""
AUTO_LIMIT = 120
"""Examples per split of ``--limit auto`` on the default dataset (all examples of any other dataset)."""
DEFAULT_BATCH_SIZE = 8
"""``--batch-size`` when not given, in every CLI: examples per model forward."""
LIMIT_HELP = (
    f"at most N examples per split (seeded, label-balanced), 'all', or 'auto' (default): {AUTO_LIMIT} per "
    "split on the default dataset, all examples of any other"
)


def parse_limit(text: str | None, flag: str = "--limit", dataset: str | None = None) -> int | None:
    """``--limit`` of the commands that read a dataset: examples per split (at least 2), ``None`` for all.

    Accepts a number, ``all`` or ``auto`` (and ``None``, the option's absence, read as `DEFAULT_LIMIT`):
    ``auto`` is `AUTO_LIMIT` on the ``default`` dataset and all examples of any other ``dataset``. A
    split needs an example of each label, so fewer than 2 is refused.

    Raises:
        UsageError: naming ``flag``.
    """
    text = DEFAULT_LIMIT if text is None else text
    if text == "auto":
        return AUTO_LIMIT if dataset == "default" else None
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"{flag} expects a number of examples per split, 'all' or 'auto', got {text!r}"
        ) from None
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


# The shared grammar: every CLI adds these options through the functions below, so a flag has one
# name, one meaning and one default across halluprobe, halujudge and halubench-data.

DATASET_HELP = (
    "dataset spec: 'default' (the embedded synthetic set), a JSONL file written by halubench-data build "
    "(or the --out folder that holds it), or NAME:PATH for a builder on local files "
    "(e.g. ragtruth-qa:data/ragtruth)"
)


def add_dataset_arg(
    parser: Any,
    *,
    default: str | None = "default",
    required: bool = False,
    help: str = DATASET_HELP,
    several: str | None = None,
) -> None:
    """Add ``--dataset SPEC`` (default ``default``), read by `halubench_data.load`.

    ``several``: the flag may repeat (a list of specs, None when absent); the text says when.
    """
    if several is not None:
        parser.add_argument(
            "--dataset", action="append", default=None, metavar="SPEC",
            help=f"{help}; repeat it {several} (default: {default})",
        )  # fmt: skip
        return
    extra = f" (default: {default})" if default is not None else " (required)"
    parser.add_argument("--dataset", default=default, required=required, metavar="SPEC", help=help + extra)


def add_limit_arg(parser: Any) -> None:
    """Add ``--limit`` (default `DEFAULT_LIMIT`), read by `parse_limit`."""
    parser.add_argument("--limit", default=DEFAULT_LIMIT, metavar="N", help=LIMIT_HELP)


def add_batch_size_arg(parser: Any, what: str = "examples per model forward") -> None:
    """Add ``--batch-size N`` (default `DEFAULT_BATCH_SIZE`)."""
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
        help=f"{what} (default {DEFAULT_BATCH_SIZE})",
    )  # fmt: skip


def add_out_arg(parser: Any, what: str, *, default: str | None = None, overwrite: bool = True) -> None:
    """Add ``--out DIR`` (an output folder; required when ``default`` is None) and ``--overwrite``.

    ``overwrite=False`` for a command whose only output is a cache (`CACHE_NAMES`): it reuses any
    folder, so it has no ``--overwrite`` (``args.overwrite`` is then None).
    """
    shown = " (required)" if default is None else f" (default {default})"
    parser.add_argument(
        "--out",
        default=default,
        required=default is None,
        metavar="DIR",
        help=f"output folder: {what}{shown}",
    )
    if not overwrite:
        parser.set_defaults(overwrite=None)
        return
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace the outputs of earlier runs in --out: the files they wrote (listed in OUT/.outputs) "
        "are removed first; caches and files no run wrote are kept. Without it, a folder holding anything "
        "besides caches is refused",
    )  # fmt: skip


def warn(message: str) -> None:
    """A one-line warning on stderr (printed even with ``--quiet``): a deprecation, a skipped input."""
    import sys

    print(f"warning: {message}", file=sys.stderr, flush=True)
