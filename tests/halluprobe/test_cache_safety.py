"""The feature cache under change, damage and concurrency (issues #20 and #21).

Before: records were keyed by example id only (an edited example or another dataset with the same ids
was scored on stale features), a damaged shard made the whole cache unusable, two writers into one
folder broke it, index paths were followed outside the folder and orphan ``.tmp`` files stayed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import dataclass, replace

import numpy as np
import pytest
from halluprobe.features import extract_records
from halluprobe.features._cache import STALE_TMP_SECONDS, CacheRepairWarning, FeatureCache


@dataclass(frozen=True)
class Ex:
    id: str
    context: str
    question: str = "q"
    answer: str = "a"


def _compute_with(record_factory, calls):
    rng = np.random.default_rng(0)

    def compute(batch):
        calls.extend(ex.id for ex in batch)
        return [record_factory(ex.id, rng, a=1 + len(ex.context) % 5) for ex in batch]

    return compute


def test_edited_example_under_the_same_id_is_recomputed(tmp_path, record_factory):
    calls: list[str] = []
    compute = _compute_with(record_factory, calls)
    first = [Ex("e0", "Paris is in France."), Ex("e1", "Lyon.")]
    extract_records(first, compute, FeatureCache(tmp_path, {"p": 1}), batch_size=2)
    edited = [first[0], replace(first[1], answer="changed")]
    calls.clear()
    out = extract_records(edited, compute, FeatureCache(tmp_path, {"p": 1}), batch_size=2)
    assert calls == ["e1"] and [r.id for r in out] == ["e0", "e1"]  # only the edited one again
    calls.clear()
    extract_records(edited, compute, FeatureCache(tmp_path, {"p": 2}), batch_size=2)
    assert sorted(calls) == ["e0", "e1"]  # other settings: everything again, nothing stale


def test_damaged_shard_costs_only_its_records(tmp_path, record_factory):
    calls: list[str] = []
    compute = _compute_with(record_factory, calls)
    examples = [Ex(f"e{i}", "c" * (i + 1)) for i in range(6)]
    extract_records(examples, compute, FeatureCache(tmp_path, {}), batch_size=2)  # three shards
    index = json.loads((tmp_path / "index.json").read_text())
    victim = index["shards"][1]
    (tmp_path / victim["file"]).write_bytes(b"garbage")
    calls.clear()
    with pytest.warns(CacheRepairWarning, match="damaged"):
        out = extract_records(examples, compute, FeatureCache(tmp_path, {}), batch_size=2)
    assert sorted(calls) == sorted(victim["ids"]) and [r.id for r in out] == [e.id for e in examples]


def test_index_paths_outside_the_folder_are_ignored(tmp_path, record_factory):
    cache = FeatureCache(tmp_path / "c", {})
    cache.add([record_factory("a", np.random.default_rng(0))])
    index = json.loads((tmp_path / "c" / "index.json").read_text())
    (tmp_path / "secret.safetensors").write_bytes((tmp_path / "c" / index["shards"][0]["file"]).read_bytes())
    index["shards"][0]["file"] = "../secret.safetensors"
    (tmp_path / "c" / "index.json").write_text(json.dumps(index))
    with pytest.warns(CacheRepairWarning, match="inside the folder"):
        again = FeatureCache(tmp_path / "c", {})
    assert len(again) == 0
    with pytest.raises(KeyError):
        again.load(["a"])


def test_orphan_tmp_files_are_removed(tmp_path, record_factory):
    FeatureCache(tmp_path, {}).add([record_factory("a", np.random.default_rng(0))])
    old = tmp_path / ".shard-0123456789abcdef.safetensors.x.tmp"
    fresh = tmp_path / ".shard-fedcba9876543210.safetensors.y.tmp"
    for f in (old, fresh):
        f.write_bytes(b"partial")
    past = time.time() - STALE_TMP_SECONDS - 60
    os.utime(old, (past, past))
    FeatureCache(tmp_path, {})
    assert not old.exists() and fresh.exists()  # a fresh one may belong to a writer still running


def _writer(root: str, start: int, n: int) -> None:
    from halluprobe.features import ExampleRecord

    rng = np.random.default_rng(start)
    cache = FeatureCache(root, {"p": "same"})
    for i in range(start, start + n):
        a = 2
        rec = ExampleRecord(
            id=f"w{i}", answer_len=a, prompt_len=3,
            head_stats=rng.random((1, 2, 3, 2)).astype(np.float32),
            sink_topk=rng.random((1, 2, 4)).astype(np.float32),
            token_prev=rng.random((1, 2, a)).astype(np.float32),
            logit_pooled=rng.random(6).astype(np.float32), token_logit=rng.random((a, 3)).astype(np.float32),
            hidden_pooled=rng.random((1, 8)).astype(np.float32), mtopdiv=np.zeros((0,), np.float32),
        )  # fmt: skip
        cache.add([rec], [cache.key(Ex(rec.id, "ctx"))])


def test_concurrent_writers_keep_every_shard(tmp_path, record_factory):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), 100 * w, 8)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = FeatureCache(tmp_path, {"p": "same"})
    assert len(cache) == 24 and cache.ids == {f"w{100 * w + i}" for w in range(3) for i in range(8)}
    assert len(cache.load()) == 24


def _extract_after_barrier(root: str, barrier, n: int) -> None:
    """Extract ``n`` examples; the first batch is computed only once every process has looked them up."""
    from halluprobe.features._records import ExampleRecord

    def compute(batch):
        barrier.wait(60)  # both extractions found nothing cached: both compute every example
        rng = np.random.default_rng(0)
        return [
            ExampleRecord(
                id=ex.id,
                answer_len=1,
                prompt_len=3,
                head_stats=rng.random((1, 2, 3, 2)).astype(np.float32),
                sink_topk=rng.random((1, 2, 4)).astype(np.float32),
                token_prev=rng.random((1, 2, 1)).astype(np.float32),
                logit_pooled=rng.random(6).astype(np.float32),
                token_logit=rng.random((1, 3)).astype(np.float32),
                hidden_pooled=rng.random((1, 8)).astype(np.float32),
                mtopdiv=np.zeros((0,), np.float32),
            )  # fmt: skip
            for ex in batch
        ]

    examples = [Ex(f"e{i}", f"context {i}") for i in range(n)]
    out = extract_records(examples, compute, FeatureCache(root, {"p": 1}), batch_size=n)
    assert [r.id for r in out] == [e.id for e in examples]


def test_two_extractions_of_the_same_examples_cache_each_record_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_extract_after_barrier, args=(str(tmp_path), barrier, 36)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = FeatureCache(tmp_path, {"p": 1})
    assert len(cache) == 36 and len(cache.keys) == 36  # each record once, not one copy per writer
    shards = json.loads((tmp_path / "index.json").read_text())["shards"]
    assert len(shards) == 1 and sorted(p.name for p in tmp_path.glob("shard-*")) == [shards[0]["file"]]


def _proxy_at(folder, seed: int):
    """A tiny random Llama saved to ``folder`` (replacing what is there) and loaded back from it."""
    import torch
    from flashstats_hf import ATTN_IMPLEMENTATION
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=48, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=2,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation=ATTN_IMPLEMENTATION).eval()


def test_new_weights_at_the_same_proxy_path_are_extracted_again(tmp_path, char_extractor, monkeypatch):
    monkeypatch.setenv("FLASHSTATS_CACHE", str(tmp_path / "digests"))
    folder, examples = tmp_path / "proxy", [Ex("e0", "Paris is in France."), Ex("e1", "Lyon.")]

    def extract(model):
        ext = char_extractor(model, backend="torch")
        calls: list[str] = []

        def compute(batch):
            calls.extend(ex.id for ex in batch)
            return ext(batch)

        cache = FeatureCache(tmp_path / "cache", {**ext.settings, "proxy": str(folder)})  # as the CLI keys it
        return extract_records(examples, compute, cache, batch_size=2), calls

    first, calls = extract(_proxy_at(folder, seed=0))
    assert sorted(calls) == ["e0", "e1"]
    assert extract(_proxy_at(folder, seed=0))[1] == []  # the same weights written again: records reused
    second, calls = extract(_proxy_at(folder, seed=1))
    assert sorted(calls) == ["e0", "e1"]  # other weights under the same path: nothing stale
    assert not np.array_equal(first[0].head_stats, second[0].head_stats)
