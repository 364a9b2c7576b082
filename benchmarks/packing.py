"""Packed vs left-padded recorded forwards on the RAGTruth + ExpertQA length mix (H200).

Random-weight models of two shapes (Qwen3-0.6B and SmolLM2-135M, bf16, every layer scored with rows,
lookups and columns, logits and one hidden layer) read token sequences whose (prompt, answer) lengths are
drawn from ``benchmarks/results/length_mix.json`` (``length_mix.py``). Providers, in one run:

- ``padded-b8``: left-padded batches: sorted by length, 8 examples per left-padded forward;
- ``packed-b8``: the same batches, each packed into one sequence (``record_forward(pack=True)``);
- ``packed-budget``: batches of :func:`halluprobe.features.plan_batches` with a 16384-token budget.

Each is timed over the whole workload after a warm pass (Triton compiled, tile candidate 0 pinned), with
the peak memory above the weights. ``--phase warm`` only compiles; ``--phase time`` measures and also
times every packed batch of the whole RAGTruth mix on the SmolLM2 shape (until ``--budget``) for the
sharding simulation of ``sharding_balance.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import Deadline, LongCsv, markdown_table  # noqa: E402

MIX = Path(__file__).resolve().parent / "results" / "length_mix.json"
BUDGET = 16384
METHODS = ("padded-b8", "packed-b8", "packed-budget")


def build(kind: str, quick: bool):
    """A random-weight model of one shape on the GPU in bf16 (``quick``: 2 layers, for a CPU smoke test)."""
    from flashstats_hf import ATTN_IMPLEMENTATION
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    if kind == "qwen3-0.6b":
        config = Qwen3Config(
            vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
            tie_word_embeddings=True,
        )  # fmt: skip
    else:
        config = LlamaConfig(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=16384, rope_theta=100000.0,
            tie_word_embeddings=True,
        )  # fmt: skip
    config.num_hidden_layers = 2 if quick else config.num_hidden_layers
    device, dtype = ("cpu", torch.float32) if quick else ("cuda", torch.bfloat16)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION, dtype=dtype)
    return model.eval()


def workloads(seed: int = 0) -> dict[str, list[tuple[int, int]]]:
    """``(prompt, answer)`` token lengths: the mix (48 RAGTruth + 16 ExpertQA) and two long batches."""
    mix = json.loads(MIX.read_text())
    rng = random.Random(seed)
    fits = lambda pairs: [p for p in pairs if sum(p) <= BUDGET]  # noqa: E731
    sample = rng.sample(fits(mix["ragtruth"]["pairs"]), 48) + rng.sample(fits(mix["expertqa"]["pairs"]), 16)
    long8 = [(n - 200, 200) for n in range(1200, 9800, 1200)]
    long16 = [(n - 200, 200) for n in range(5000, 9800, 300)]
    return {"mix": sample, "long8": long8, "long16": long16, "ragtruth": fits(mix["ragtruth"]["pairs"])}


def batches(pairs: list[tuple[int, int]], method: str) -> list[list[int]]:
    """The batches of a method: 8 (16 for the long16 workload) per forward, or the token budget."""
    from halluprobe.features import plan_batches

    lengths = [p + a for p, a in pairs]
    if method == "packed-budget":
        return plan_batches(lengths, batch_size=256, token_budget=BUDGET)
    return plan_batches(lengths, batch_size=16 if len(pairs) == 16 else 8)


def run_batch(model, pairs, batch, pack: bool, vocab: int) -> None:
    from flashstats_hf import DEFAULT_REQUEST, collate, record_forward

    gen = torch.Generator().manual_seed(len(batch))
    encoded = [
        (torch.randint(3, vocab, (sum(pairs[i]),), generator=gen).tolist(), pairs[i][0]) for i in batch
    ]
    b = collate(encoded, pad_token_id=0).to(model.device)
    record_forward(
        model, b.input_ids, response_start=b.response_start, attention_mask=b.attention_mask,
        request=DEFAULT_REQUEST, logits=True, hidden_layers=[model.config.num_hidden_layers // 2], pack=pack,
    )  # fmt: skip


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(model, pairs, method: str) -> dict[str, float]:
    """Seconds, real tokens per second and peak memory above the weights (GiB) of one workload."""
    plan = batches(pairs, method)
    cuda = model.device.type == "cuda"
    base = torch.cuda.memory_allocated() if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    try:
        for batch in plan:
            run_batch(model, pairs, batch, not method.startswith("padded"), model.config.vocab_size)
        sync()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {
            "seconds": float("nan"),
            "tokens_per_s": 0.0,
            "peak_gib": float("nan"),
            "oom": 1,
            "batches": len(plan),
        }
    sec = time.perf_counter() - t0
    tokens = sum(p + a for p, a in pairs)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else float("nan")
    return {"seconds": sec, "tokens_per_s": tokens / sec, "peak_gib": peak, "oom": 0, "batches": len(plan)}


def per_batch_times(model, pairs, deadline: Deadline, csv: LongCsv) -> None:
    """Times every packed batch of the whole RAGTruth mix (the input of the sharding simulation)."""
    for i, batch in enumerate(batches(pairs, "packed-budget")):
        if deadline.over():
            break
        sync()
        t0 = time.perf_counter()
        run_batch(model, pairs, batch, True, model.config.vocab_size)
        sync()
        lengths = [sum(pairs[j]) for j in batch]
        csv.add(batch=i, examples=len(batch), tokens=sum(lengths), sq_tokens=sum(n * n for n in lengths),
                seconds=time.perf_counter() - t0)  # fmt: skip


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--budget", type=float, default=30.0, help="seconds for the per-batch RAGTruth timing")
    ap.add_argument("--phase", choices=("warm", "time"), default="time")
    ap.add_argument("--quick", action="store_true", help="2-layer fp32 models on the CPU, a few examples")
    return ap.parse_args()


def main() -> int:
    args = parse()
    loads = workloads()
    if args.quick:
        loads = {name: pairs[:3] for name, pairs in loads.items()}
    fields = ("model", "workload", "method", "seconds", "tokens_per_s", "peak_gib", "oom", "batches")
    csv = LongCsv(args.out / "packing.csv", fields) if args.phase == "time" else None
    rows = []
    for kind in ("qwen3-0.6b", "smollm2-135m"):
        model = build(kind, args.quick)
        with torch.no_grad():
            if args.phase == "warm":
                for method in METHODS:
                    last = batches(loads["mix"], method)[-1]
                    run_batch(model, loads["mix"], last, method != "padded-b8", model.config.vocab_size)
            else:
                rows += time_workloads(model, kind, loads, csv)
            if kind == "smollm2-135m" and args.phase == "time":
                fields_b = ("batch", "examples", "tokens", "sq_tokens", "seconds")
                times = LongCsv(args.out / "packing_batches.csv", fields_b)
                per_batch_times(model, loads["ragtruth"], Deadline(args.budget), times)
                times.close()
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if csv is not None:
        csv.close()
        header = ["model", "workload", "method", "batches", "s", "tokens/s", "peak GiB", "OOM"]
        table = markdown_table(header, rows)
        (args.out / "packing.md").write_text(table + "\n")
        print(table)
    return 0


def time_workloads(model, kind: str, loads: dict, csv: LongCsv) -> list[list[object]]:
    """Every method on every workload (the mix twice: its first pass warms the new shapes)."""
    rows = []
    for workload in ("mix", "long8", "long16"):
        for method in METHODS if workload == "mix" else ("padded-b8", "packed-b8"):
            for _ in range(2 if workload == "mix" else 1):
                got = measure(model, loads[workload], method)
            csv.add(model=kind, workload=workload, method=method, **got)
            speed, peak = f"{got['tokens_per_s']:.0f}", f"{got['peak_gib']:.2f}"
            rows.append(
                [kind, workload, method, got["batches"], f"{got['seconds']:.3f}", speed, peak, got["oom"]]
            )
            print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
