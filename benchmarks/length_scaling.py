"""Length scaling on the GPU: Base, <=T1, <=T3 and SDPA from 1K to 100K tokens at r in {0.1, 0.3}, d = 128.

32 query / 8 KV heads, bf16, batch 1. Writes ``length_scaling.csv`` (long format), ``length_scaling.md``
and ``length_scaling.png`` (TFLOP/s and time over Base against L).
"""

from __future__ import annotations

import math

import torch
from _attn_providers import make_inputs, ours, sdpa_provider
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

PROVIDERS = ("base", "t1", "t3", "fa2_block", "cudnn_full")
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 100000)


def measure(csv: LongCsv, length: int, ratio: float) -> None:
    rows = max(1, round(ratio * length))
    q, k, v = make_inputs(length, rows, 128)
    times = {}
    for name in PROVIDERS:
        try:
            fn = (
                ours(name, q, k, v, rows)
                if name in ("base", "t1", "t3")
                else sdpa_provider(name, q, k, v, rows)
            )
            times[name] = bench_ms(fn, rep=40, warmup=10)
        except RuntimeError as err:
            print(f"  {name} L={length}: {str(err).splitlines()[0][:120]}")
            times[name] = math.nan
    for name, ms in times.items():
        pairs = causal_pairs(length, length if name.endswith("_full") else rows)
        csv.add(
            L=length,
            r=ratio,
            R=rows,
            d=128,
            provider=name,
            ms=f"{ms:.4f}",
            tflops=f"{attention_tflops(32, 128, pairs, ms):.1f}",
            vs_base=f"{ms / times['base']:.3f}",
        )
    print(f"L={length} r={ratio} " + " ".join(f"{n}={t:.3f}" for n, t in times.items()), flush=True)
    del q, k, v
    torch.cuda.empty_cache()


def report(csv: LongCsv, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    table = []
    for ratio in (0.1, 0.3):
        rows = [r for r in csv.rows if r["r"] == ratio]
        for name in PROVIDERS:
            pts = [(r["L"], float(r["tflops"]), float(r["vs_base"])) for r in rows if r["provider"] == name]
            if not pts:
                continue
            xs, tf, rel = zip(*pts, strict=True)
            ax1.plot(xs, tf, marker="o", ls="-" if ratio == 0.3 else "--", label=f"{name} r={ratio}")
            if name in ("t1", "t3", "fa2_block"):
                ax2.plot(xs, rel, marker="o", ls="-" if ratio == 0.3 else "--", label=f"{name} r={ratio}")
        for length in sorted({r["L"] for r in rows}):
            p = {r["provider"]: r for r in rows if r["L"] == length}
            table.append(
                [
                    length,
                    ratio,
                    p["base"]["ms"],
                    p["base"]["tflops"],
                    p["t1"]["vs_base"],
                    p["t3"]["vs_base"],
                    p["fa2_block"]["tflops"],
                    p["cudnn_full"]["tflops"],
                ]
            )
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("L (tokens)")
        ax.legend(fontsize=6)
    ax1.set_ylabel("TFLOP/s (unmasked scores)")
    ax2.set_ylabel("time / Base")
    fig.tight_layout()
    fig.savefig(out / "length_scaling.png", dpi=120)
    env = csv.env
    head = [
        "L",
        "r",
        "Base ms",
        "Base TFLOP/s",
        "T1/Base",
        "T3/Base",
        "FA2 block TFLOP/s",
        "cuDNN full TFLOP/s",
    ]
    text = f"# Length scaling ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
    (out / "length_scaling.md").write_text(
        text + command_line() + "d = 128, 32/8 heads, bf16.\n\n" + markdown_table(head, table)
    )


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(
        args.out / "length_scaling.csv", ("L", "r", "R", "d", "provider", "ms", "tflops", "vs_base")
    )
    deadline = Deadline(args.budget)
    lengths = (1024, 2048) if args.quick else LENGTHS
    for ratio in (0.3, 0.1):
        for length in lengths:
            if deadline.over():
                print("budget spent: stopping early")
                break
            measure(csv, length, ratio)
    csv.close()
    report(csv, args.out)


if __name__ == "__main__":
    main()
