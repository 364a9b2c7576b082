"""Atomic file writing shared by every package: a reader never sees a half-written file.

Every writer of the workspace (datasets, caches, saved detectors, reports) goes through
`atomic_path`: the content is written to a temporary file in the destination folder, synced,
given the permissions a plain ``open(path, "w")`` would give (``0o666`` minus the process umask;
``tempfile.mkstemp`` alone leaves ``0o600``), then renamed into place. A crash leaves the old file,
if any, intact and removes the temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "default_file_mode"]


def default_file_mode() -> int:
    """``0o666`` without the bits of the current umask: the mode ``open(path, "w")`` creates files with."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on a clean exit it is renamed to ``path``.

    Use it for writers that want a file name (``safetensors.save_file``, ``numpy.savez``); the
    caller writes the whole content to the yielded path inside the ``with`` block.

    Args:
        path: the destination (its folder is created when missing).
        overwrite: when false, refuse to replace an existing ``path``.

    Raises:
        FileExistsError: when ``path`` exists and ``overwrite`` is false.
    """
    path = Path(path)
    if not overwrite and path.exists():
        raise _exists(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, default_file_mode())
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _place_new(tmp: Path, path: Path) -> None:
    """Give ``tmp`` the name ``path`` only if no file has taken it since the early check.

    A hard link fails atomically when ``path`` exists (a check then a rename would replace a file that
    another process wrote between the two); file systems without hard links get the check and the rename.
    """
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists(path) from None
    except OSError:  # no hard links here (some network and FAT file systems)
        if path.exists():
            raise _exists(path) from None
        os.replace(tmp, path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, overwrite: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (see `atomic_path`); returns ``path``.

    Raises:
        FileExistsError: when ``path`` exists and ``overwrite`` is false.
    """
    with atomic_path(path, overwrite=overwrite) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, overwrite: bool = False) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see `atomic_path`); returns ``path``.

    Raises:
        FileExistsError: when ``path`` exists and ``overwrite`` is false (the default, so that a
            dataset or report is never replaced by accident).
    """
    return atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(f"{path} exists; pass overwrite=True (CLI: --overwrite) to replace it")
