"""Data-parallel extraction: sharding, cache parts, resumption, and a two-process ``torchrun`` on gloo."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from halluprobe.features import ExampleRecord, FeatureCache, extract_records
from halluprobe.features._distributed import World, batch_cost, shard_batches

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ex:
    id: str
    context: str
    question: str = "q"
    answer: str = "a"


class ThreadWorld(World):
    """A world whose ranks are threads of this process (barriers on a shared threading.Barrier)."""

    def __init__(self, rank: int, size: int, barrier: threading.Barrier):
        super().__init__(rank=rank, size=size)
        object.__setattr__(self, "_barrier", barrier)

    def barrier(self) -> None:
        self._barrier.wait(timeout=60)


def test_shard_batches_is_deterministic_balanced_and_complete():
    rng = np.random.default_rng(0)
    costs = [batch_cost(rng.integers(100, 3000, size=rng.integers(1, 9)).tolist()) for _ in range(57)]
    for size in (1, 2, 3, 8):
        owned = shard_batches(costs, size)
        assert sorted(i for r in owned for i in r) == list(range(len(costs)))
        assert owned == shard_batches(costs, size)
        loads = [sum(costs[i] for i in r) for r in owned]
        assert max(loads) <= sum(costs) / size + max(costs)  # the greedy rule's guarantee
    assert shard_batches([5.0, 5.0, 5.0], 2) == [[0, 2], [1]]
    with pytest.raises(ValueError, match="size"):
        shard_batches([1.0], 0)


def test_world_device_names():
    assert World().device("cuda") == "cuda" and World().main
    assert World(rank=1, size=2, local_rank=1).device("cuda") == "cuda:1"
    assert World(rank=1, size=2, local_rank=1).device("cpu") == "cpu"


def _records(examples, factory, seed=0):
    rng = np.random.default_rng(seed)
    return {ex.id: factory(ex.id, rng, a=1 + len(ex.context) % 4) for ex in examples}


def _run_ranks(size, examples, made, root, fail_rank=None, calls=None):
    """Runs ``extract_records`` on ``size`` thread ranks; ``fail_rank`` dies after its first batch."""
    barrier = threading.Barrier(size)
    errors: dict[int, BaseException] = {}

    def rank_main(rank: int) -> None:
        done = []

        def compute(batch):
            if rank == fail_rank and done:
                barrier.abort()  # torchrun tears the others down when one process dies
                raise RuntimeError("rank died")
            done.append(batch)
            if calls is not None:
                calls.append((rank, [ex.id for ex in batch]))
            return [made[ex.id] for ex in batch]

        cache = FeatureCache(root, {"proxy": "x"})
        try:
            extract_records(examples, compute, cache, batch_size=2, world=ThreadWorld(rank, size, barrier))
        except (RuntimeError, threading.BrokenBarrierError) as exc:
            errors[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _assert_same(a: list[ExampleRecord], b: list[ExampleRecord]) -> None:
    assert [r.id for r in a] == [r.id for r in b]
    for x, y in zip(a, b, strict=True):
        for key in ("head_stats", "sink_topk", "token_prev", "logit_pooled", "token_logit", "hidden_pooled"):
            np.testing.assert_array_equal(getattr(x, key), getattr(y, key))


def test_ranks_write_parts_rank0_merges_and_a_dead_rank_resumes(tmp_path, record_factory):
    examples = [Ex(f"e{i}", "c" * (3 + (i * 7) % 11)) for i in range(13)]
    made = _records(examples, record_factory)
    one = FeatureCache(tmp_path / "one", {"proxy": "x"})
    want = extract_records(examples, lambda b: [made[ex.id] for ex in b], one, batch_size=2)

    calls: list = []
    errors = _run_ranks(2, examples, made, tmp_path / "two", fail_rank=1, calls=calls)
    assert isinstance(errors.get(1), RuntimeError)
    cache = FeatureCache(tmp_path / "two", {"proxy": "x"})
    partial = {
        i
        for part in (tmp_path / "two" / "parts").glob("*/index.json")
        for i in FeatureCache(part.parent, cache.settings).ids
    }
    assert 0 < len(partial) < len(examples)  # both ranks wrote something before the run died

    calls.clear()
    assert _run_ranks(3, examples, made, tmp_path / "two", calls=calls) == {}  # resume with another size
    recomputed = [i for _, ids in calls for i in ids]
    assert not set(recomputed) & partial and sorted(recomputed) == sorted({e.id for e in examples} - partial)
    assert {rank for rank, _ in calls} == {0, 1, 2}
    got = FeatureCache(tmp_path / "two", {"proxy": "x"}).load([e.id for e in examples])
    _assert_same(got, want)
    again = FeatureCache(tmp_path / "two", {"proxy": "x"})
    assert again.merge_parts() == 0 and len(again) == len(examples)


def test_merge_rejects_a_part_that_repeats_cached_ids(tmp_path, record_factory):
    rng = np.random.default_rng(3)
    cache = FeatureCache(tmp_path, {"proxy": "x"})
    cache.add([record_factory("a", rng)])
    cache.part("rank-00000").add([record_factory("a", rng)])
    with pytest.raises(ValueError, match="repeats ids"):
        cache.merge_parts()
    with pytest.raises(ValueError, match="plain folder name"):
        cache.part("../x")


def _tiny_proxy(folder: Path) -> Path:
    """A 2-layer random Llama with the SmolLM2 tokenizer (its chat template), saved as a local proxy."""
    import torch
    from flashstats_hf.loading import default_gguf_path, dequantized_gguf
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(dequantized_gguf(default_gguf_path()))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=2, initializer_range=0.3, tie_word_embeddings=True,
    )  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_torchrun_two_processes_give_the_one_process_cache_and_detectors(tmp_path):
    """``torchrun --nproc-per-node 2 -m halluprobe train`` on gloo against the same run in one process."""
    proxy = _tiny_proxy(tmp_path / "proxy")
    args = ["train", "--limit", "4", "--proxy", str(proxy), "--device", "cpu", "--feature-sets", "A7",
            "--no-published", "--batch-size", "2", "--quiet"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what torchrun gives each process
    one = subprocess.run([sys.executable, "-m", "halluprobe", *args, "--out", str(tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "halluprobe", *args, "--out", str(tmp_path / "two")],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    parts = sorted(p.name for p in (tmp_path / "two" / "cache" / "parts").iterdir())
    assert parts == ["rank-00000", "rank-00001"]
    settings: dict = {}  # the index keeps no settings (they are part of each record's key); load reads by id
    a, b = (
        FeatureCache(tmp_path / "one" / "cache", settings),
        FeatureCache(tmp_path / "two" / "cache", settings),
    )
    ids = sorted(a.ids)
    assert ids == sorted(b.ids) and len(ids) == 12
    _assert_same(a.load(ids), b.load(ids))
    for name in ("detector.json", "detector.safetensors"):
        one_bytes = (tmp_path / "one" / "detectors" / "A7" / name).read_bytes()
        assert one_bytes == (tmp_path / "two" / "detectors" / "A7" / name).read_bytes(), name


def test_one_process_commands_refuse_torchrun(monkeypatch, capsys, tmp_path):
    from halluprobe.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["evaluate", str(tmp_path), "--limit", "4"]) == 2
    assert "runs in one process" in capsys.readouterr().err
