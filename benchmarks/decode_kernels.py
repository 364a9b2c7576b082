"""Decoding kernels alone: the cost of each statistic family per attention call (H200).

One attention layer of each shape, ``decode_attention`` on the Triton backend with a device ``kv_len``
(as in a captured step), timed with ``triton.testing.do_bench_cudagraph`` (graph replays, no launch
overhead) for the request levels none / T1 / T1+T2 / T1+T2+T3, R = 1 (a decoding step) and R = 16
(a chunk). A device profile of the none and T1+T2+T3 calls at the longest context splits the time
per kernel. The whole decode step of a model is in ``streaming.py``; this script says which kernel
its time sits in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import triton.testing
from _perf import LongCsv, kernel_us, markdown_table
from flashstats_kernels import ColumnState, StatsRequest, decode_attention
from flashstats_kernels.ops.decode import fused
from triton.testing import do_bench_cudagraph as bench

SHAPES = {  # query heads, KV heads, head dim, layers (to scale a call to a step)
    "llama3-8b": (32, 8, 128, 32),
    "qwen3-0.6b": (16, 8, 128, 28),
    "smollm2-135m": (9, 3, 64, 30),
}
LEVELS = ("none", "T1", "T1+T2", "T1+T2+T3")


def _call(shape: str, ctx: int, rows: int, level: str, splits: int | None = None):
    """A zero-argument function that runs one decoding call of ``level`` (inputs built once)."""
    hq, hkv, d, _ = SHAPES[shape]
    dev = "cuda"
    q = torch.randn(1, hq, rows, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, hkv, ctx + 64, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    kv_len = torch.tensor([ctx], device=dev)
    sinks = torch.tensor([[0, 1, 2, 3]], device=dev)
    request = StatsRequest(
        rows=level != "none", lookups="T2" in level, columns="T3" in level,
        sink_positions=sinks if "T2" in level else None,
    )  # fmt: skip
    state = ColumnState.zeros(1, hq, ctx + 64, dev) if "T3" in level else None
    prompt = torch.tensor([ctx // 2], device=dev)

    def run() -> None:
        decode_attention(
            q, k, v, kv_len=kv_len, request=request, column_state=state, prompt_len=prompt, splits=splits,
            backend="triton",
        )  # fmt: skip

    return run


def _kernel_us(fn, calls: int = 20) -> dict[str, float]:
    """Device microseconds per call of each kernel that ``fn`` launches (profiler, kernels only)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {name[:40]: us for name, us in kernel_us(prof, calls).items()}


def _configs(text: str) -> list[dict[str, int]]:
    """``"w2:n64,w4:n128"`` -> ``[{}, {"SPLIT_WARPS": 2, "BLOCK_N": 64}, ...]`` (``{}``: the default)."""
    out: list[dict[str, int]] = [{}]
    for item in filter(None, text.split(",")):
        keys = {"w": "SPLIT_WARPS", "n": "BLOCK_N"}
        out.append({keys[part[0]]: int(part[1:]) for part in item.split(":")})
    return out


def sweep(args: argparse.Namespace) -> None:
    """R = 1: none and all statistics at each split count (None: the default) and kernel config."""
    csv = LongCsv(args.out / "decode_splits.csv", ("shape", "ctx", "config", "splits", "level", "us"))
    table = []
    for shape in args.shapes.split(","):
        for ctx in (int(c) for c in args.contexts.split(",")):
            for cfg in _configs(args.sweep_configs):
                fused.CONFIG_OVERRIDES.clear()
                fused.CONFIG_OVERRIDES.update(cfg)
                name = ":".join(f"{k}={v}" for k, v in cfg.items()) or "default"
                for splits in [None, *(int(n) for n in filter(None, args.sweep_splits.split(",")))]:
                    try:
                        us = {
                            lv: 1e3 * bench(_call(shape, ctx, 1, lv, splits), rep=100)
                            for lv in ("none", "T1+T2+T3")
                        }  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 - a config that does not compile is reported
                        print(shape, ctx, name, splits, "failed:", repr(exc)[:200], flush=True)
                        continue
                    for lv, t in us.items():
                        csv.add(shape=shape, ctx=ctx, config=name, splits=splits or "default", level=lv,
                                us=f"{t:.2f}")  # fmt: skip
                    table.append([shape, ctx, name, splits or "default", f"{us['none']:.1f}",
                                  f"{us['T1+T2+T3']:.1f}", f"{us['T1+T2+T3'] / us['none']:.3f}"])  # fmt: skip
                    print(*table[-1], flush=True)
    fused.CONFIG_OVERRIDES.clear()
    csv.close()
    text = markdown_table(["shape", "context", "config", "splits", "none us", "all us", "all / none"], table)
    (args.out / "decode_splits.md").write_text(text + "\n")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--sweep-splits", default="", help="split counts to time at R = 1 instead (16,33,66)")
    ap.add_argument(
        "--sweep-configs", default="", help="split-kernel warps and key tiles to time (w2:n64,w4:n128)"
    )
    args = ap.parse_args()
    if args.sweep_splits or args.sweep_configs:
        sweep(args)
        return
    csv = LongCsv(args.out / "decode_kernels.csv", ("shape", "ctx", "R", "level", "us", "ratio"))
    table, kernels = [], []
    for shape in args.shapes.split(","):
        for ctx in (int(c) for c in args.contexts.split(",")):
            for rows in (int(r) for r in args.rows.split(",")):
                times = {}
                for level in LEVELS:
                    fn = _call(shape, ctx, rows, level)
                    times[level] = 1e3 * triton.testing.do_bench_cudagraph(fn, rep=200)
                    ratio = f"{times[level] / times['none']:.3f}"
                    csv.add(shape=shape, ctx=ctx, R=rows, level=level, us=f"{times[level]:.2f}", ratio=ratio)
                layers = SHAPES[shape][3]
                extra_ms = (times["T1+T2+T3"] - times["none"]) * layers / 1e3
                table.append(
                    [shape, ctx, rows, *(f"{times[lv]:.1f}" for lv in LEVELS),
                     f"{times['T1+T2+T3'] / times['none']:.2f}x", f"{extra_ms:.3f}"]
                )  # fmt: skip
                if ctx == max(int(c) for c in args.contexts.split(",")):
                    for level in ("none", "T1+T2+T3"):
                        for name, us in _kernel_us(_call(shape, ctx, rows, level)).items():
                            kernels.append([shape, ctx, rows, level, name, f"{us:.1f}"])
    csv.close()
    header = ["shape", "context", "R", *(f"{lv} us" for lv in LEVELS), "all / none", "extra ms per step"]
    per_kernel = markdown_table(["shape", "context", "R", "level", "kernel", "us"], kernels)
    text = markdown_table(header, table) + "\n\n" + per_kernel
    (args.out / "decode_kernels.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
