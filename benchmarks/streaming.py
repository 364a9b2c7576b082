"""Scoring while generating: what statistics cost per decode step and when following an answer.

Every measurement is a set of providers timed side by side in one run on random-weight shapes (bf16):

- ``decode``: one decode step on a StaticCache, CUDA-graph captured (``GraphedDecodeStep``), after a
  ``ctx``-token prefill. Providers: ``splitk`` (the same split-K decoding kernel without statistics,
  through a ``CachedRecorder`` that asks for nothing: the like-for-like baseline, it reads the same
  ``kv_len`` keys), ``stats`` (T1, T2, T3 on every layer, logit statistics, one hidden layer) and
  ``sdpa`` (the stock Transformers step: SDPA over the whole static cache with its dense mask).
  Target: stats / splitk <= 1.10.
- ``follow``: a ``ctx``-token prompt, then an answer of ``answer`` tokens in chunks of ``chunk``.
  Providers: ``teacher_forced`` (one ``record_forward`` over the finished sequence, the baseline),
  ``eager`` (``CachedRecorder.feed`` per chunk on a DynamicCache), ``graphed`` (a StaticCache, prefill
  and every chunk replayed from a CUDA graph captured for an earlier answer, with its parts
  ``graphed_prefill`` and ``graphed_replay``, ms per chunk), ``graphed_first`` (the first answer, which
  pays for two eager warm-up steps and the capture) and ``graphed_plain`` (``graphed`` without
  statistics: the floor of following in chunks).
  Target: eager and graphed <= 1.20x teacher_forced.
- ``memory``: peak CUDA memory of eager following for two answer lengths, minus the weights, the KV
  cache and the recorder's buffers (per-token outputs, per-key column state): the residual must not
  grow with the answer.
- ``syncs``: host synchronisations in one eager chunk call (``torch.cuda.set_sync_debug_mode``) and the
  top host-time operators of that call (``torch.profiler``), written to ``streaming_profile.txt``.

Writes ``streaming.csv`` (long format, with GPU and versions; a row is flushed as soon as it is
measured) and ``streaming.md`` under ``--out``. ``--shapes tiny`` runs end to end on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import warnings
from pathlib import Path

import torch
import transformers
from _perf import LongCsv, kernel_us
from flashstats_hf import DEFAULT_REQUEST, CachedRecorder, GraphedDecodeStep, record_forward
from flashstats_kernels import StatsRequest
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, Qwen3Config, StaticCache

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
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=65536, tie_word_embeddings=True,
    ),
    "tiny": lambda: LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
    ),
}  # fmt: skip
FIELDS = ("transformers", "shape", "bench", "ctx", "tokens", "provider", "value", "unit")
NOTHING = StatsRequest(rows=False, lookups=False, columns=False)
"""What the ``splitk`` baseline asks for: the decoding kernel's attention output only."""


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


def _recorder(model, prompt: int, capacity: int, cache=None, stats: bool = True) -> CachedRecorder:
    """A recorder with the benchmark's statistics (``stats``) or with none (the split-K baseline)."""
    if not stats:
        return CachedRecorder(
            model, prompt_len=prompt, request=NOTHING, logits=False, capacity=capacity, cache=cache
        )
    mid = model.config.num_hidden_layers // 2
    return CachedRecorder(
        model, prompt_len=prompt, request=DEFAULT_REQUEST, logits=True, hidden_layers=(mid,),
        capacity=capacity, cache=cache,
    )  # fmt: skip


def decode_step_ms(model, ctx: int, steps: int, provider: str, device: str) -> float:
    """Mean time of a captured decode step after a ``ctx``-token prefill (``sdpa``, ``splitk``, ``stats``)."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + steps + 4), device=device)
    cache = StaticCache(config=model.config, max_cache_len=ctx + steps + 8)
    keep = torch.ones(1, ctx, dtype=torch.long, device=device)
    rec = None if provider == "sdpa" else _recorder(model, ctx, steps + 8, cache, stats=provider == "stats")
    model.set_attn_implementation("sdpa" if provider == "sdpa" else "attnstats")
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


def follow_eager_ms(model, ids: torch.Tensor, ctx: int, chunk: int, device: str) -> float:
    """Prefill plus one ``CachedRecorder.feed`` per chunk on a DynamicCache, statistics read at the end."""
    _sync(device)
    t0 = time.perf_counter()
    rec = _recorder(model, ctx, ids.shape[1] - ctx)
    with rec:
        rec.feed(ids[:, :ctx])
        for at in range(ctx, ids.shape[1], chunk):
            rec.feed(ids[:, at : at + chunk])
    rec.stats()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def follow_graphed(model, ids: torch.Tensor, ctx: int, chunk: int, device: str, stats: bool) -> dict:
    """Following on a StaticCache with chunk steps replayed from a CUDA graph, two answers, ms.

    The first answer pays for two eager warm-up steps and the capture (``first``); the step is then
    restarted for a second answer, all of whose chunks are replays (``total``, with its ``prefill`` and
    the mean ``replay`` per chunk): what a process that follows answers one after another pays.
    """
    answer = ids.shape[1] - ctx
    keep = torch.ones(1, ctx, dtype=torch.long, device=device)
    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1])
    rec = _recorder(model, ctx, answer, cache, stats=stats)
    starts = list(range(ctx, ids.shape[1], chunk))
    step, got = None, {}
    with torch.no_grad(), rec:
        for run in ("first", "total"):
            _sync(device)
            t0 = time.perf_counter()
            if step is not None:
                cache.reset()
                rec.restart()
            rec.feed(ids[:, :ctx])
            _sync(device)
            t1 = time.perf_counter()
            if step is None:
                step = GraphedDecodeStep(
                    model, cache, keep, recorder=rec, capture=device == "cuda", tokens_per_step=chunk
                )
            else:
                step.restart(keep)
            for at in starts:
                step(ids[:, at : at + chunk])
            rec.stats()
            _sync(device)
            t2 = time.perf_counter()
            got[run] = (t2 - t0) * 1e3
        got["prefill"], got["replay"] = (t1 - t0) * 1e3, (t2 - t1) * 1e3 / len(starts)
    return got


def teacher_forced_ms(model, ids: torch.Tensor, ctx: int, device: str) -> float:
    """One ``record_forward`` over the finished sequence with the same statistics as the recorder."""
    mid = model.config.num_hidden_layers // 2
    _sync(device)
    t0 = time.perf_counter()
    record_forward(model, ids, response_start=ctx, request=DEFAULT_REQUEST, logits=True, hidden_layers=(mid,))
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def follow_rows(model, ctx: int, answer: int, chunk: int, device: str) -> dict[str, float]:
    """Every ``follow`` provider, second of two runs each (the first compiles and tunes)."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + answer), device=device)
    got: dict[str, float] = {}
    for _ in range(2):
        got["teacher_forced"] = teacher_forced_ms(model, ids, ctx, device)
        got["eager"] = follow_eager_ms(model, ids, ctx, chunk, device)
        parts = follow_graphed(model, ids, ctx, chunk, device, stats=True)
        got.update({"graphed": parts["total"], "graphed_first": parts["first"]})
        got.update({"graphed_prefill": parts["prefill"], "graphed_replay": parts["replay"]})
        got["graphed_plain"] = follow_graphed(model, ids, ctx, chunk, device, stats=False)["total"]
    return got


def _bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_rows(model, ctx: int, answers: tuple[int, ...], chunk: int, device: str) -> list[dict]:
    """Peak memory of eager following minus weights, KV cache and recorder buffers, per answer length."""
    out = []
    weights = _bytes(*model.parameters())
    for answer in answers:
        ids = torch.randint(0, model.config.vocab_size, (1, ctx + answer), device=device)
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        rec = _recorder(model, ctx, answer)
        with rec:
            rec.feed(ids[:, :ctx])
            for at in range(ctx, ids.shape[1], chunk):
                rec.feed(ids[:, at : at + chunk])
        _sync(device)
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0  # the CPU runs the code only
        assert isinstance(rec.cache, DynamicCache)
        cache = _bytes(*(t for layer in rec.cache.layers for t in (layer.keys, layer.values)))
        kept = rec.buffer_bytes()
        mib = 1 << 20
        residual = (peak - weights - cache - kept) / mib
        out.append({"answer": answer, "peak": (peak - weights) / mib, "kv_cache": cache / mib,
                    "recorder_buffers": kept / mib, "residual": residual})  # fmt: skip
        del rec
    return out


def sync_profile(model, ctx: int, chunk: int, device: str, path: Path) -> int:
    """Synchronisations in one eager chunk call, and its top host-time operators (written to ``path``)."""
    ids = torch.randint(0, model.config.vocab_size, (1, ctx + 3 * chunk), device=device)
    rec = _recorder(model, ctx, 3 * chunk)
    with rec:
        rec.feed(ids[:, :ctx])
        rec.feed(ids[:, ctx : ctx + chunk])
        _sync(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                rec.feed(ids[:, ctx + chunk : ctx + 2 * chunk])
            finally:
                if device == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        _sync(device)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            rec.feed(ids[:, ctx + 2 * chunk :])
            _sync(device)
    # set_sync_debug_mode announces itself once with a warning that is no synchronisation
    syncs = [
        str(w.message).splitlines()[0]
        for w in caught
        if "synchroniz" in str(w.message) and "prototype feature" not in str(w.message)
    ]
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    path.write_text(
        f"synchronising calls in one eager chunk: {len(syncs)}\n" + "\n".join(syncs) + "\n\n" + table
    )
    return len(syncs)


def decode_profile(model, ctx: int, device: str, path: Path) -> dict[str, float]:
    """Device time per decode step by kernel, without and with statistics (eager steps), to ``path``.

    Returns:
        ``{provider: device ms per step}`` for ``splitk`` and ``stats``.
    """
    totals, tables, kernels = {}, [], {}
    for provider in ("splitk", "stats"):
        ids = torch.randint(0, model.config.vocab_size, (1, ctx + 12), device=device)
        cache = StaticCache(config=model.config, max_cache_len=ctx + 16)
        rec = _recorder(model, ctx, 16, cache, stats=provider == "stats")
        with torch.no_grad(), rec:
            rec.feed(ids[:, :ctx])
            step = GraphedDecodeStep(
                model, cache, torch.ones(1, ctx, device=device), recorder=rec, capture=False
            )
            for i in range(2):
                step(ids[:, ctx + i : ctx + i + 1])
            _sync(device)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=activities) as prof:
                for i in range(2, 7):
                    step(ids[:, ctx + i : ctx + i + 1])
                _sync(device)
        events = prof.key_averages()
        attr = "device_time_total" if device == "cuda" else "cpu_time_total"
        per_kernel = kernel_us(prof, 5)
        totals[provider] = sum(per_kernel.values()) / 1e3
        kernels[provider] = per_kernel
        tables.append(
            f"== {provider}: {totals[provider]:.3f} device ms per step\n"
            + events.table(sort_by=attr, row_limit=25)
        )
    path.write_text("\n\n".join(tables))
    path.with_suffix(".json").write_text(json.dumps(kernels, indent=1))
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--shapes", default="llama3-8b,qwen3-0.6b,smollm2-135m")
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--follow-ctx", type=int, default=4096)
    ap.add_argument("--answer", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--memory-answers", default="256,1024")
    ap.add_argument("--budget", type=float, default=float("inf"), help="seconds before no new shape starts")
    ap.add_argument("--benches", default="follow,decode,memory,syncs", help="measurements to run")
    ap.add_argument(
        "--profile-decode", default="", help="SHAPE:CTX,...: only device time per kernel of a step"
    )
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "streaming.csv", FIELDS)
    start = time.perf_counter()
    if args.profile_decode:
        for item in args.profile_decode.split(","):
            shape, ctx = item.split(":")
            model = build(shape, device)
            path = args.out / f"streaming_decode_profile_{shape}_{ctx}.txt"
            for provider, ms in decode_profile(model, int(ctx), device, path).items():
                csv.add(transformers=transformers.__version__, shape=shape, bench="decode_device", ctx=ctx,
                        tokens=1, provider=provider, value=round(ms, 4), unit="ms")  # fmt: skip
                print(shape, ctx, provider, f"{ms:.3f} device ms per step", flush=True)
            del model
        csv.close()
        return

    def row(shape, bench, ctx, tokens, provider, value, unit="ms"):
        csv.add(transformers=transformers.__version__, shape=shape, bench=bench, ctx=ctx, tokens=tokens,
                provider=provider, value=round(value, 4), unit=unit)  # fmt: skip
        print(shape, bench, ctx, tokens, provider, f"{value:.3f}", unit, flush=True)

    for shape in args.shapes.split(","):
        if time.perf_counter() - start > args.budget:
            print(f"budget spent: {shape} not run", flush=True)
            continue
        model = build(shape, device)
        benches = set(args.benches.split(","))
        if "follow" in benches:
            for name, ms in follow_rows(model, args.follow_ctx, args.answer, args.chunk, device).items():
                row(shape, "follow", args.follow_ctx, args.answer, name, ms)
        for ctx in (int(c) for c in args.contexts.split(",")) if "decode" in benches else ():
            for provider in ("splitk", "stats", "sdpa"):
                row(
                    shape,
                    "decode",
                    ctx,
                    1,
                    provider,
                    decode_step_ms(model, ctx, args.steps, provider, device),
                )
        answers = tuple(map(int, args.memory_answers.split(","))) if "memory" in benches else ()
        for m in memory_rows(model, args.follow_ctx, answers, args.chunk, device):
            for key in ("peak", "kv_cache", "recorder_buffers", "residual"):
                row(shape, "memory", args.follow_ctx, m["answer"], key, m[key], "MiB")
        if "syncs" in benches:
            path = args.out / f"streaming_profile_{shape}.txt"
            syncs = sync_profile(model, args.follow_ctx, args.chunk, device, path)
            row(shape, "syncs", args.follow_ctx, args.chunk, "eager_chunk", syncs, "count")
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
        write_table(csv.rows, args.out / "streaming.md")
    csv.close()


def write_table(rows: list[dict], md_path: Path) -> None:
    """Ratios: stats / splitk (and / sdpa) per decode step; each following provider / teacher_forced."""
    by = {(r["shape"], r["bench"], str(r["ctx"]), r["provider"]): float(r["value"]) for r in rows}
    env = rows[0]
    lines = [
        f"Scoring while generating, {env['gpu']}, torch {env['torch']}, triton {env['triton']}, "
        f"transformers {env['transformers']}, {env['date']}. Random-weight bf16 shapes, batch 1.",
        "",
        "| shape | measurement | context | baseline | baseline ms | ms | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (shape, bench, ctx, provider), ms in by.items():
        if bench == "decode" and provider in ("stats", "sdpa") and (shape, bench, ctx, "splitk") in by:
            base, name = by[(shape, bench, ctx, "splitk")], "split-K, no statistics"
            what, target = f"decode step ({provider}), graphed", 1.10 if provider == "stats" else None
        elif bench == "follow" and provider in ("eager", "graphed", "graphed_first", "graphed_plain"):
            base, name = by[(shape, bench, ctx, "teacher_forced")], "teacher-forced record_forward"
            what, target = (
                f"follow in chunks ({provider})",
                1.20 if provider in ("eager", "graphed") else None,
            )
        else:
            continue
        ratio = ms / base
        verdict = "" if target is None else ("met" if ratio <= target else "missed")
        goal = "" if target is None else f"<= {target:.2f}x"
        cells = (shape, what, ctx, name, f"{base:.3f}", f"{ms:.3f}", f"{ratio:.2f}x", goal, verdict)
        lines.append("| " + " | ".join(cells) + " |")
    md_path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
