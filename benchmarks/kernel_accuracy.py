"""Accuracy of every kernel statistic against fp64: our Triton kernels vs the dense bf16 path.

The dense path is what ``output_attentions`` pipelines do: softmax in fp32, probabilities cast to bf16,
then the statistics reduced in PyTorch, either on the bf16 tensor (bf16 results, PyTorch's default) or
after an upcast of the rounded probabilities to fp32 (a more generous baseline); both are reported.
Random bf16 inputs, Qwen3-8B attention shapes (32 query heads, 8 KV heads, d = 128), response
fraction r = 0.3, no padding, prompt length ``L - R``, sink position 0 (BOS). The fp64 reference and
the dense path run one query head at a time on the GPU so that the response block fits in memory.

Usage: ``python3 benchmarks/kernel_accuracy.py --out DIR [--lengths 2048 8192 32768]`` (on CUDA).
Writes ``DIR/kernel_accuracy_h200.csv`` (long format) and ``DIR/kernel_accuracy_h200.md``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
from pathlib import Path

import torch
import triton
from flashstats_kernels.ops.columns.fused import columns_triton
from flashstats_kernels.ops.columns.naive import naive_columns_from_probs
from flashstats_kernels.ops.forward.fused import forward_triton
from flashstats_kernels.ops.forward.naive import naive_probabilities, naive_row_stats
from flashstats_kernels.ops.lookups.fused import lookups_triton
from flashstats_kernels.ops.lookups.naive import naive_lookups_from_probs

HQ, HKV, D, RATIO, EPS = 32, 8, 128, 0.3, 1e-30
PROVIDERS = ("ours", "dense_bf16_fp32_reduce", "dense_bf16")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU only for a smoke run under TRITON_INTERPRET=1
STATS = (
    "entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support",
    "diag_log", "prev_weight", "sink_weight", "column_sum", "column_mean",
)  # fmt: skip


def flatten(rows, lookups, columns) -> dict[str, torch.Tensor]:
    """One tensor per statistic name (sink weight of position 0)."""
    out = {n: getattr(rows, n) for n in STATS[:5]}
    out |= {"diag_log": lookups.diag_log, "prev_weight": lookups.prev_weight}
    out["sink_weight"] = lookups.sink_weights[..., 0]
    out |= {"column_sum": columns.sum, "column_mean": columns.mean}
    return out


def dense_bf16(q, k, prompt_len: int, scale: float, reduce: torch.dtype) -> dict[str, torch.Tensor]:
    """The dense path on one head: fp32 softmax, bf16 probabilities, reductions in ``reduce``.

    ``reduce=torch.bfloat16`` is what PyTorch does with bf16 weights (fp32 accumulation inside each
    reduction, bf16 results); ``reduce=torch.float32`` upcasts the rounded weights first (more generous).
    """
    R, L = q.shape[-2], k.shape[-2]
    s = (q.float() @ k.float().transpose(-1, -2)) * scale  # [1, 1, R, L]
    pos = torch.arange(L - R, L, device=q.device)[:, None]
    key = torch.arange(L, device=q.device)[None, :]
    vis = key <= pos
    p = torch.softmax(s.masked_fill(~vis, float("-inf")), -1).to(torch.bfloat16).to(reduce)
    del s
    ent = -(p * torch.where(p > 0, torch.log(p), 0.0)).sum(-1)
    n = vis.sum(-1).to(reduce)
    rows = torch.arange(R, device=q.device)
    diag = p[..., rows, pos[:, 0]]
    prev = torch.where(pos[:, 0] > prompt_len, p[..., rows, (pos[:, 0] - 1).clamp(min=0)], 0.0)
    col = p.sum(-2)
    return {
        "entropy": ent, "normalized_entropy": torch.where(n > 1, ent / n.clamp(min=2).log(), 0.0),
        "prompt_mass": p[..., :prompt_len].sum(-1), "max_weight": p.amax(-1),
        "effective_support": 1.0 / (p * p).sum(-1),
        "diag_log": torch.log(diag).clamp(min=math.log(EPS)), "prev_weight": prev, "sink_weight": p[..., 0],
        "column_sum": col, "column_mean": col / vis.sum(-2).clamp(min=1).to(reduce),
    }  # fmt: skip


def reference_fp64(q, k, prompt_len: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    """The fp64 reference on one head."""
    s, vis, lse, p = naive_probabilities(q, k, key_mask=None, scale=scale, softcap=None, window=None)
    sinks = torch.zeros(1, 1, dtype=torch.int64, device=q.device)
    return flatten(
        naive_row_stats(p, s, lse, vis, prompt_len),
        naive_lookups_from_probs(p, s, lse, vis, prompt_len=prompt_len, sink_positions=sinks, diag_eps=EPS),
        naive_columns_from_probs(p, vis, key_mask=None, prompt_len=prompt_len),
    )


def measure(L: int, seed: int = 0) -> list[dict]:
    """Errors of both providers at sequence length ``L`` over all heads."""
    R = round(RATIO * L)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    q = torch.randn(1, HQ, R, D, device=DEVICE, generator=gen).bfloat16()
    k = torch.randn(1, HKV, L, D, device=DEVICE, generator=gen).bfloat16()
    v = torch.randn(1, HKV, L, D, device=DEVICE, generator=gen).bfloat16()
    scale, plen = D**-0.5, torch.tensor([L - R], device=DEVICE)
    common = {"key_mask": None, "prompt_len": plen, "scale": scale, "softcap": None, "window": None}
    _, lse, rows = forward_triton(q, k, v, **common, rows=True)
    sinks = torch.zeros(1, 1, dtype=torch.int64, device=DEVICE)
    lk = lookups_triton(q, k, lse, **common, sink_positions=sinks, diag_eps=EPS)
    ours = flatten(rows, lk, columns_triton(q, k, lse, **common))
    acc = {(p, n): [0.0, 0, 0.0] for p in PROVIDERS for n in STATS}  # sum, count, max
    for h in range(HQ):
        qh, kh = q[:, h : h + 1], k[:, h // (HQ // HKV) : h // (HQ // HKV) + 1]
        ref = reference_fp64(qh, kh, plen, scale)
        dense32 = dense_bf16(qh, kh, L - R, scale, torch.float32)
        dense16 = dense_bf16(qh, kh, L - R, scale, torch.bfloat16)
        for name in STATS:
            pairs = (ours[name][:, h : h + 1], dense32[name], dense16[name])
            for prov, val in zip(PROVIDERS, pairs, strict=True):
                err = (val.double() - ref[name]).abs()
                a = acc[(prov, name)]
                a[0] += err.sum().item()
                a[1] += err.numel()
                a[2] = max(a[2], err.max().item())
        del ref, dense32, dense16
    return [
        {"L": L, "R": R, "provider": p, "statistic": n, "mean_abs_err": a[0] / a[1], "max_abs_err": a[2]}
        for (p, n), a in acc.items()
    ]


def write(rows: list[dict], out: Path) -> None:
    """Long-format CSV and a Markdown table of the error ratios (dense / ours)."""
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    with open(out / "kernel_accuracy_h200.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*meta, "L", "R", "heads", "d", "provider", "statistic",
                                          "mean_abs_err", "max_abs_err"])  # fmt: skip
        w.writeheader()
        for r in rows:
            w.writerow(meta | {"heads": f"{HQ}q/{HKV}kv", "d": D} | r)
    by = {(r["L"], r["provider"], r["statistic"]): r for r in rows}
    lines = [
        f"# Kernel accuracy against fp64 ({meta['date']}, {meta['gpu']}, torch {meta['torch']}, "
        f"triton {meta['triton']})",
        "",
        f"Random bf16 inputs (q, k, v ~ N(0, 1)), {HQ} query / {HKV} KV heads (all heads), d = {D}, "
        f"R = {RATIO} L, no padding, prompt = L - R, sink = position 0. Mean and max absolute error against "
        "fp64 over all response rows (columns: all keys) of all heads. Dense = fp32 softmax cast to bf16, "
        "then reduced by PyTorch either on the bf16 tensor (`bf16`, bf16 results) or after an upcast to fp32 "
        "(`fp32 red.`). Ratio = dense error / our error; the paper's claim is >= 1000x.",
        "",
        "| L | statistic | ours mean | ours max | dense bf16 mean | ratio | dense fp32 red. mean | ratio "
        "| ratio of max (bf16 / fp32 red.) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for L in sorted({r["L"] for r in rows}):
        for n in STATS:
            o, d16, d32 = (by[(L, p, n)] for p in ("ours", "dense_bf16", "dense_bf16_fp32_reduce"))
            om, ox = max(o["mean_abs_err"], 1e-300), max(o["max_abs_err"], 1e-300)
            m16, m32 = d16["mean_abs_err"], d32["mean_abs_err"]
            x16, x32 = d16["max_abs_err"] / ox, d32["max_abs_err"] / ox
            lines.append(
                f"| {L} | {n} | {o['mean_abs_err']:.2e} | {o['max_abs_err']:.2e} "
                f"| {m16:.2e} | {m16 / om:.3g} | {m32:.2e} | {m32 / om:.3g} | {x16:.3g} / {x32:.3g} |"
            )
    (out / "kernel_accuracy_h200.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 32768])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for L in args.lengths:
        rows += measure(L)
        print(f"L={L} done", flush=True)
    write(rows, args.out)
    print((args.out / "kernel_accuracy_h200.md").read_text())


if __name__ == "__main__":
    main()
