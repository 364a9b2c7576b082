"""Tier table (paper Q2) on the GPU: Base, <=T1, <=T2, <=T3 against SDPA, one run, ratios and TFLOP/s.

Grid: L in {4K, 16K, 32K}, r = R / L in {0.1, 0.3, 0.5}, d in {64, 128, 256}; 32 query / 8 KV heads, bf16,
batch 1. Providers: our four tiers on the R response rows, SDPA-FA2 on the same response block
(bottom-right causal), SDPA-FA2 and SDPA-cuDNN full causal over all L rows. TFLOP/s counts only the
unmasked scores. Writes ``tier_table.csv`` (long format), ``tier_table.md`` and ``tier_table.png``.
"""

from __future__ import annotations

import math

import torch
from _attn_providers import TIERS, make_inputs, ours, sdpa_provider
from _perf import (
    Deadline,
    LongCsv,
    attention_tflops,
    bench_ms,
    causal_pairs,
    command_line,
    markdown_table,
    parse_args,
)

PROVIDERS = (*TIERS, "fa2_block", "fa2_full", "cudnn_full")


def measure(csv: LongCsv, length: int, ratio: float, d: int) -> None:
    rows = max(1, round(ratio * length))
    q, k, v = make_inputs(length, rows, d)
    times = {}
    for name in PROVIDERS:
        try:
            fn = ours(name, q, k, v, rows) if name in TIERS else sdpa_provider(name, q, k, v, rows)
            times[name] = bench_ms(fn)
        except RuntimeError as err:  # a backend that refuses the shape
            print(f"  {name} L={length} d={d}: {str(err).splitlines()[0][:120]}")
            times[name] = math.nan
    for name, ms in times.items():
        pairs = causal_pairs(length, length if name.endswith("_full") else rows)
        csv.add(
            L=length,
            r=ratio,
            R=rows,
            d=d,
            provider=name,
            ms=f"{ms:.4f}",
            tflops=f"{attention_tflops(32, d, pairs, ms):.1f}",
            vs_base=f"{ms / times['base']:.3f}",
        )
    print(f"L={length} r={ratio} d={d} " + " ".join(f"{n}={t:.3f}" for n, t in times.items()), flush=True)
    del q, k, v
    torch.cuda.empty_cache()


def write_markdown(csv: LongCsv, path) -> None:
    by = {}
    for r in csv.rows:
        by.setdefault((r["d"], r["L"], r["r"]), {})[r["provider"]] = r
    header = [
        "d",
        "L",
        "r",
        "Base ms",
        "T1/Base",
        "T2/Base",
        "T3/Base",
        "Base TFLOP/s",
        "FA2 block TFLOP/s",
        "Base/FA2 block speed",
        "cuDNN full TFLOP/s",
        "FA2 full TFLOP/s",
    ]
    out = []
    for (d, length, ratio), p in sorted(by.items()):
        base = float(p["base"]["ms"])
        out.append(
            [
                d,
                length,
                ratio,
                f"{base:.3f}",
                p["t1"]["vs_base"],
                p["t2"]["vs_base"],
                p["t3"]["vs_base"],
                p["base"]["tflops"],
                p["fa2_block"]["tflops"],
                f"{float(p['fa2_block']['ms']) / base:.2f}",
                p["cudnn_full"]["tflops"],
                p["fa2_full"]["tflops"],
            ]
        )
    env = csv.env
    text = f"# Tier table ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
    text += command_line() + "32 query / 8 KV heads, bf16, batch 1; median of `triton.testing.do_bench`.\n\n"
    path.write_text(text + markdown_table(header, out))


def plot(csv: LongCsv, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, d in zip(axes, (64, 128, 256), strict=True):
        rows = [r for r in csv.rows if r["d"] == d]
        cfgs = sorted({(r["L"], r["r"]) for r in rows})
        x = range(len(cfgs))
        for tier in ("t1", "t2", "t3", "fa2_block"):
            y = [
                next(
                    (float(r["vs_base"]) for r in rows if (r["L"], r["r"]) == c and r["provider"] == tier),
                    math.nan,
                )
                for c in cfgs
            ]
            ax.plot(x, y, marker="o", label={"fa2_block": "SDPA-FA2 block"}.get(tier, f"<={tier.upper()}"))
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(list(x), [f"{c[0] // 1024}K/{c[1]}" for c in cfgs], rotation=60, fontsize=7)
        ax.set_title(f"d = {d}")
    axes[0].set_ylabel("time / Base")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "tier_table.csv", ("L", "r", "R", "d", "provider", "ms", "tflops", "vs_base"))
    deadline = Deadline(args.budget)
    lengths, ratios, dims = ((4096, 16384, 32768), (0.1, 0.3, 0.5), (128, 64, 256))
    if args.quick:
        lengths, ratios, dims = (1024,), (0.3,), (128,)
    for d in dims:
        for length in lengths:
            for ratio in ratios:
                if deadline.over():
                    print("budget spent: stopping early")
                    break
                measure(csv, length, ratio, d)
    csv.close()
    write_markdown(csv, args.out / "tier_table.md")
    plot(csv, args.out / "tier_table.png")


if __name__ == "__main__":
    main()
