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


def test_file_digest_is_remembered_until_the_file_is_rewritten(tmp_path):
    import hashlib
    import json

    from flashstats_hf.loading import file_digest

    path, cache = tmp_path / "model.safetensors", tmp_path / "cache"
    path.write_bytes(b"first weights")
    assert file_digest(path, cache) == hashlib.sha256(b"first weights").hexdigest()
    (memo,) = (cache / "digests").glob("*.json")
    doc = json.loads(memo.read_text())
    memo.write_text(json.dumps({**doc, "sha256": "0" * 64}))
    assert file_digest(path, cache) == "0" * 64  # unchanged file: read back, not hashed again
    stat = path.stat()
    path.write_bytes(b"other weights")  # same size, modification time set back
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_digest(path, cache) == hashlib.sha256(b"other weights").hexdigest()


def test_weights_digest_follows_the_folder_and_the_parameters(tmp_path):
    import torch
    from flashstats_hf.loading import weights_digest
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=24, num_attention_heads=2,
        num_key_value_heads=1, num_hidden_layers=1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    in_memory = weights_digest(model)
    model.save_pretrained(tmp_path / "p")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "p")
    on_disk = weights_digest(loaded, tmp_path / "cache")
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    assert weights_digest(model) != in_memory
    model.save_pretrained(tmp_path / "p")
    assert weights_digest(loaded, tmp_path / "cache") != on_disk  # the files changed under the same path
