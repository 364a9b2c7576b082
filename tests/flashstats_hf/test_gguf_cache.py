"""The dequantised-GGUF cache is keyed by content and cleans up after killed conversions (issue #21, item 5).

Before: the folder was named by (file stem, size, mtime), so another GGUF with the same name, size and
mtime loaded the first one's weights; a killed conversion left its temporary folder forever.
"""

from __future__ import annotations

import fcntl
import os

from flashstats_hf.loading import gguf_cache_folder, remove_orphans


def test_same_name_size_and_mtime_but_other_bytes_get_another_folder(tmp_path):
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for path, payload in ((a, b"GGUF" + bytes(1000)), (b, b"GGUF" + bytes(999) + b"\x01")):
        path.parent.mkdir()
        path.write_bytes(payload)
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert a.stat().st_size == b.stat().st_size and a.stat().st_mtime == b.stat().st_mtime
    cache = tmp_path / "cache"
    assert gguf_cache_folder(a, cache) != gguf_cache_folder(b, cache)
    assert gguf_cache_folder(a, cache) == gguf_cache_folder(tmp_path / "a" / "model.gguf", cache)
    assert gguf_cache_folder(a, cache).parent == cache


def test_orphan_temporary_folders_are_removed_but_live_ones_kept(tmp_path):
    dead, live = tmp_path / ".tmp-dead", tmp_path / ".tmp-live"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(bytes(100))
    with open(live / ".lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a conversion still running
        remove_orphans(tmp_path)
        assert not dead.exists() and (live / "model.safetensors").exists()
