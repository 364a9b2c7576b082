"""Scoring while generating: what statistics cost per decode step and when following an answer.

Two measurements, each a ratio of two providers timed side by side in one run on random-weight
shapes (bf16):

- ``decode``: one decode step on a StaticCache, CUDA-graph captured (``GraphedDecodeStep``), plain
  (stock SDPA attention) vs with a ``CachedRecorder`` scoring every layer (T1, T2, T3, logit
  statistics, one hidden layer), at a context of ``ctx`` tokens. Target: <= 1.10x.
- ``follow``: an answer of ``answer`` tokens after a ``ctx``-token prompt, fed in chunks of 16 to a
  ``CachedRecorder`` (prefill included), eagerly (``chunked``) and as chunk steps replayed from a CUDA
  graph on a static cache (``chunked_graphed``, warm-up and capture included), vs one teacher-forced
  ``record_forward`` over the finished sequence. Target: <= 1.20x.

Writes ``streaming.csv`` (long format: one row per measurement, with GPU and versions) and
``streaming.md`` under ``--out``; rows are appended as each measurement finishes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import time
from pathlib import Path

import torch
import transformers
import triton
from flashstats_hf import DEFAULT_REQUEST, CachedRecorder, GraphedDecodeStep, record_forward
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, StaticCache

SHAPES = {
    "llama3-8b": lambda: LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=65536,
    ),
    "qwen3-0.6b": lambda: Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=65536,
    ),
    "smollm2-135m": lambda: LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=65536,
    ),
    "tiny": lambda: LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    ),
}  # fmt: skip
FIELDS = [
    "date",
    "gpu",
    "torch",
    "triton",
    "transformers",
    "shape",
    "bench",
    "ctx",
    "tokens",
    "provider",
    "ms",
]


def build(shape: str, device: str) -> torch.nn.Module:
    """A random-weight bf16 model of ``shape`` (fp32 on CPU) with the ``attnstats`` attention."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            SHAPES[shape](), dtype=dtype, attn_implementation="attnstats"
        )
    return model.eval()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _recorder(model, prompt: int, capacity: int, cache=None) -> CachedRecorder:
    mid = model.config.num_hidden_layers // 2
    return CachedRecorder(
        model, prompt_len=prompt, request=DEFAULT_REQUEST, logits=True, hidden_layers=(mid,),
        capacity=capacity, cache=cache,
    )  # fmt: skip


def decode_step_ms(model, ctx: int, steps: int, stats: bool, device: str) -> float:
    """Mean time of a captured decode step after a ``ctx``-token prefill, plain or recorded."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + steps + 4), device=device)
    cache = StaticCache(config=model.config, max_cache_len=ctx + steps + 8)
    keep = torch.ones(1, ctx, dtype=torch.long, device=device)
    rec = _recorder(model, ctx, steps + 8, cache) if stats else None
    model.set_attn_implementation("attnstats" if stats else "sdpa")
    with torch.no_grad(), contextlib.ExitStack() as stack:
        if rec is not None:
            stack.enter_context(rec)
            rec.feed(ids[:, :ctx])
        else:
            model(input_ids=ids[:, :ctx], past_key_values=cache, use_cache=True, logits_to_keep=1)
        step = GraphedDecodeStep(model, cache, keep, recorder=rec, capture=device == "cuda")
        for i in range(3):  # two eager warm-up steps and the capture
            step(ids[:, ctx + i : ctx + i + 1])
        _sync(device)
        t0 = time.perf_counter()
        for i in range(3, steps + 3):
            step(ids[:, ctx + i : ctx + i + 1])
        _sync(device)
        elapsed = time.perf_counter() - t0
    model.set_attn_implementation("attnstats")
    return elapsed / steps * 1e3


def follow_graphed_ms(model, ctx: int, answer: int, chunk: int, device: str) -> float:
    """Following on a StaticCache with chunk steps from a CUDA graph (warm-up and capture included), ms."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + answer), device=device)
    keep = torch.ones(1, ctx, dtype=torch.long, device=device)
    _sync(device)
    t0 = time.perf_counter()
    cache = StaticCache(config=model.config, max_cache_len=ctx + answer)
    rec = _recorder(model, ctx, answer, cache)
    with torch.no_grad(), rec:
        rec.feed(ids[:, :ctx])
        step = GraphedDecodeStep(
            model, cache, keep, recorder=rec, capture=device == "cuda", tokens_per_step=chunk
        )
        for at in range(ctx, ctx + answer, chunk):
            step(ids[:, at : at + chunk])
    rec.stats()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def follow_ms(model, ctx: int, answer: int, chunk: int, device: str) -> tuple[float, float]:
    """``(chunked following, one teacher-forced forward)`` total times in ms (second of two runs each)."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + answer), device=device)
    mid = model.config.num_hidden_layers // 2
    times = []
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        rec = _recorder(model, ctx, answer)
        with rec:
            rec.feed(ids[:, :ctx])
            for at in range(ctx, ctx + answer, chunk):
                rec.feed(ids[:, at : at + chunk])
        rec.stats()
        _sync(device)
        t1 = time.perf_counter()
        record_forward(
            model, ids, response_start=ctx, request=DEFAULT_REQUEST, logits=True, hidden_layers=(mid,)
        )
        _sync(device)
        times.append(((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3))
    return times[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--shapes", default="llama3-8b,qwen3-0.6b,smollm2-135m")
    parser.add_argument("--contexts", default="8192,32768")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--follow-ctx", type=int, default=4096)
    parser.add_argument("--answer", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=16)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
    }  # fmt: skip
    path = out / "streaming.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()

        def row(**kw):
            writer.writerow({**meta, **kw})
            fh.flush()
            print(kw, flush=True)

        for shape in args.shapes.split(","):
            model = build(shape, device)
            for ctx in (int(c) for c in args.contexts.split(",")):
                for stats in (False, True):
                    ms = decode_step_ms(model, ctx, args.steps, stats, device)
                    row(
                        shape=shape,
                        bench="decode",
                        ctx=ctx,
                        tokens=1,
                        provider="stats" if stats else "plain",
                        ms=ms,
                    )
            chunked, forward = follow_ms(model, args.follow_ctx, args.answer, args.chunk, device)
            follow_graphed_ms(model, args.follow_ctx, args.answer, args.chunk, device)  # compile
            graphed = follow_graphed_ms(model, args.follow_ctx, args.answer, args.chunk, device)
            for provider, ms in (
                ("chunked", chunked),
                ("chunked_graphed", graphed),
                ("teacher_forced", forward),
            ):
                row(
                    shape=shape,
                    bench="follow",
                    ctx=args.follow_ctx,
                    tokens=args.answer,
                    provider=provider,
                    ms=ms,
                )
            del model
            if device == "cuda":
                torch.cuda.empty_cache()
    write_table(path, out / "streaming.md", meta)


def write_table(csv_path: Path, md_path: Path, meta: dict) -> None:
    """The Markdown table of ratios: stats / plain per decode step, chunked / teacher-forced following."""
    rows = list(csv.DictReader(csv_path.open()))
    by = {(r["shape"], r["bench"], r["ctx"], r["provider"]): float(r["ms"]) for r in rows}
    tokens = {(r["shape"], r["bench"], r["ctx"]): r["tokens"] for r in rows}
    lines = [
        f"Scoring while generating, {meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, "
        f"transformers {meta['transformers']}, {meta['date']} UTC. Random-weight bf16 shapes, batch 1.",
        "",
        "| shape | measurement | context | baseline ms | with statistics ms | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (shape, bench, ctx, provider), ms in by.items():
        base_name, target = ("plain", 1.10) if bench == "decode" else ("teacher_forced", 1.20)
        if provider == base_name or (shape, bench, ctx, base_name) not in by:
            continue
        base = by[(shape, bench, ctx, base_name)]
        n = tokens[(shape, bench, ctx)]
        kind = "graphed" if provider == "chunked_graphed" else "eager"
        what = "decode step, graphed" if bench == "decode" else f"follow {n} tokens, {kind} chunks"
        ratio = ms / base
        lines.append(
            f"| {shape} | {what} | {ctx} | {base:.3f} | {ms:.3f} | {ratio:.2f}x | <= {target:.2f}x | "
            f"{'met' if ratio <= target else 'missed'} |"
        )
    md_path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
