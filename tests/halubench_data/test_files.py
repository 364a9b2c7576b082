"""The one atomic writer: whole files or none, and the permissions ``open()`` would give."""

import os
import stat

import numpy as np
import pytest
from halubench_data import atomic_path, atomic_write_bytes, atomic_write_text, best_by_validation


@pytest.fixture
def umask():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_files_get_the_umask_mode_not_0600(tmp_path, mask):
    old = os.umask(mask)
    try:
        p = atomic_write_bytes(tmp_path / "sub" / "a.bin", b"x")
        q = atomic_write_text(tmp_path / "b.txt", "y")
        with atomic_path(tmp_path / "c.npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, a=np.arange(3))
    finally:
        os.umask(old)
    for path in (p, q, tmp_path / "c.npz"):
        assert _mode(path) == 0o666 & ~mask
    assert np.load(tmp_path / "c.npz")["a"].tolist() == [0, 1, 2]


def test_refuses_to_overwrite_unless_asked(tmp_path, umask):
    path = atomic_write_text(tmp_path / "t.txt", "old")
    with pytest.raises(FileExistsError, match="overwrite"):
        atomic_write_text(path, "new")
    assert atomic_write_text(path, "new", overwrite=True).read_text() == "new"
    atomic_write_bytes(path, b"bytes")  # bytes default to replacing (caches, indexes)
    assert path.read_bytes() == b"bytes"


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
def test_a_file_written_by_another_process_meanwhile_is_kept(tmp_path, umask, monkeypatch, links):
    """No-overwrite is decided when the file is placed, not only before writing starts."""
    if not links:

        def no_link(src, dst):
            raise OSError(95, "Operation not supported")

        monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "t.txt"
    with pytest.raises(FileExistsError, match="overwrite"), atomic_path(path, overwrite=False) as tmp:
        tmp.write_text("ours")
        path.write_text("theirs")  # another process, after the early check
    assert path.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    assert atomic_write_text(tmp_path / "new.txt", "fresh").read_text() == "fresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "t.txt"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, umask):
    path = atomic_write_text(tmp_path / "t.txt", "old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_best_by_validation_keeps_the_first_of_ties():
    scores = {0.1: 0.7, 1.0: 0.9, 10.0: 0.9, 100.0: 0.9 + 1e-13}
    assert best_by_validation([0.1, 1.0, 10.0], lambda c: (scores[c], f"m{c}")) == (1.0, 0.9, "m1.0")
    assert best_by_validation(sorted(scores), lambda c: (scores[c], c), tol=0.0)[0] == 100.0
    assert best_by_validation(sorted(scores), lambda c: (scores[c], c), tol=1e-12)[0] == 1.0
    with pytest.raises(ValueError, match="at least one candidate"):
        best_by_validation([], lambda c: (0.0, c))
