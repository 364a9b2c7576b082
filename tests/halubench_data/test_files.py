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


def test_overwrite_removes_only_the_files_a_run_listed(tmp_path):
    from halubench_data.files import OUTPUTS_MANIFEST, claim_outputs, listed_outputs, release_outputs

    out = tmp_path / "run"
    (out / "detectors" / "mine").mkdir(parents=True)
    (out / "mynotes.txt").write_text("mine")
    (out / "detectors" / "mine" / "keep.txt").write_text("mine too")
    try:
        assert claim_outputs(out, remove_earlier=False, kept=frozenset({"cache"})) == []
        atomic_write_text(out / "report.md", "run 1", overwrite=True)
        atomic_write_bytes(out / "detectors" / "A7" / "detector.json", b"{}")
        atomic_write_text(out / "cache" / "x.npz", "cached", overwrite=True)  # a cache: never listed
        (out / "plot.png").write_bytes(b"png")  # written without the atomic writer: listed at release
        with pytest.raises(FileExistsError, match="no run of these tools wrote it"):
            atomic_write_text(out / "mynotes.txt", "clobbered", overwrite=True)
    finally:
        release_outputs()
    listed = {"report.md", "detectors/A7/detector.json", "plot.png"}
    assert listed_outputs(out) == listed and (out / OUTPUTS_MANIFEST).is_file()
    removed = claim_outputs(out, remove_earlier=True, kept=frozenset({"cache"}))
    release_outputs()
    assert sorted(removed) == sorted(listed)
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert left == ["cache/x.npz", "detectors/mine/keep.txt", "mynotes.txt"]
    assert (out / "mynotes.txt").read_text() == "mine" and not (out / "detectors" / "A7").exists()


def test_a_listed_path_outside_the_folder_is_never_removed(tmp_path):
    from halubench_data.files import OUTPUTS_MANIFEST, claim_outputs, release_outputs

    out, outside = tmp_path / "run", tmp_path / "precious.txt"
    out.mkdir()
    outside.write_text("keep")
    (out / OUTPUTS_MANIFEST).write_text(f"../precious.txt\n{outside}\n")  # a tampered manifest
    assert claim_outputs(out, remove_earlier=True) == []
    release_outputs()
    assert outside.read_text() == "keep"
