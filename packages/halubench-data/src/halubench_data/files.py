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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OUTPUTS_MANIFEST",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "claim_outputs",
    "default_file_mode",
    "listed_outputs",
    "release_outputs",
]


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
    _record_output(path)
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


OUTPUTS_MANIFEST = ".outputs"
"""In an output folder: the files that runs of these tools wrote there, one relative path a line.

``--overwrite`` removes these and nothing else (`claim_outputs`); a file of the user's beside them is kept.
"""


@dataclass
class _Claim:
    root: Path
    kept: frozenset[str]
    before: frozenset[str]
    """Files (relative) present once the earlier outputs were removed: not ours, never replaced."""


_CLAIMS: list[_Claim] = []
_LOCK = threading.Lock()


def _files_under(root: Path, kept: frozenset[str]) -> set[str]:
    """Relative POSIX paths of the files under ``root``, without the entries ``kept`` and the manifest."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in kept]
            filenames = [f for f in filenames if f not in kept and f != OUTPUTS_MANIFEST]
        out.update((rel / f).as_posix() for f in filenames)
    return out


def listed_outputs(folder: str | os.PathLike[str]) -> set[str]:
    """The relative paths that ``folder``'s `OUTPUTS_MANIFEST` lists (empty when it has none)."""
    manifest = Path(folder) / OUTPUTS_MANIFEST
    if not manifest.is_file():
        return set()
    lines = manifest.read_text(encoding="utf-8", errors="replace").splitlines()
    return {line for line in lines if line and not Path(line).is_absolute() and ".." not in Path(line).parts}


def claim_outputs(
    folder: str | os.PathLike[str], *, remove_earlier: bool, kept: frozenset[str] = frozenset()
) -> list[str]:
    """Make ``folder`` the output folder of this run: every file written there is listed in its manifest.

    With ``remove_earlier`` (``--overwrite``), the files that earlier runs listed are removed first
    (and the folders they leave empty); anything else in the folder is kept. From then on until
    `release_outputs`, `atomic_path` lists each file it writes under ``folder`` (before the file
    appears, so a crash leaves no unlisted output) and refuses to replace a file it did not write.

    Args:
        folder: the output folder (created by the first file written there, not here).
        remove_earlier: remove the files that the manifest lists.
        kept: top-level names never listed nor removed (resumable caches).

    Returns:
        The relative paths removed.
    """
    root = Path(folder).absolute()
    removed = []
    if remove_earlier:
        for rel in sorted(listed_outputs(root)):
            if rel.split("/")[0] in kept:
                continue
            target = root / rel
            if target.is_file() or target.is_symlink():
                target.unlink()
                removed.append(rel)
                _remove_empty_parents(target.parent, root)
        (root / OUTPUTS_MANIFEST).unlink(missing_ok=True)
    with _LOCK:  # the folder is created by the first write: a command that fails first leaves none
        _CLAIMS.append(_Claim(root, frozenset(kept), frozenset(_files_under(root, frozenset(kept)))))
    return removed


def release_outputs() -> None:
    """Stop listing: files that appeared in a claimed folder without `atomic_path` are listed too."""
    with _LOCK:
        claims = list(_CLAIMS)
        _CLAIMS.clear()
    for claim in claims:
        if claim.root.is_dir():
            new = _files_under(claim.root, claim.kept) - claim.before - listed_outputs(claim.root)
            _append(claim.root, sorted(new))


def _remove_empty_parents(folder: Path, root: Path) -> None:
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty: holds a file that is not ours
            return
        folder = folder.parent


def _append(root: Path, rels: list[str]) -> None:
    if rels:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / OUTPUTS_MANIFEST, "a", encoding="utf-8") as f:
            f.write("".join(f"{r}\n" for r in rels))
            f.flush()
            os.fsync(f.fileno())


def _record_output(path: Path) -> None:
    """List ``path`` in the manifest of the claimed folder that holds it; refuse to replace another's file."""
    with _LOCK:
        if not _CLAIMS:
            return
        full = path.absolute()
        for claim in _CLAIMS:
            if claim.root not in full.parents:
                continue
            rel = full.relative_to(claim.root).as_posix()
            if rel.split("/")[0] in claim.kept or rel == OUTPUTS_MANIFEST:
                return
            if rel in claim.before:
                manifest = claim.root / OUTPUTS_MANIFEST
                raise FileExistsError(
                    f"{path} exists and no run of these tools wrote it (it is not in {manifest}); it is "
                    "kept: move it, or choose another output folder"
                )
            if rel not in listed_outputs(claim.root):
                _append(claim.root, [rel])
            return


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(f"{path} exists; pass overwrite=True (CLI: --overwrite) to replace it")
