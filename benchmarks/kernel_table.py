"""Kernel table: every tier against Base and SDPA-FA2 across head dims.

Grid: d in {64, 80, 96, 128, 256}, L in {16K, 32K}, r = R / L in {0.1, 0.3, 0.5}; 32 query / 8 KV heads
(GQA) and, at d = 96, 32 / 32 (MHA); bf16, batch 1. Providers: Base, <=T1, <=T2, <=T3 (``t3``, only at
the head dims with a <=T3 target, 64 and 128), SDPA-FA2 on the same response block, and at a head dim
that the forward splits into a head and a tail (80, 96) the padded Base (``base_pad``,
``FLASHSTATS_SPLIT_D=0``). The T3 variants with a share of their exponentials on the FMA pipes
(``FLASHSTATS_T3_SPLIT_EXP=2/4/8``) were measured slower at every point and are not timed here.
Points run in priority order (r = 0.3 at 16K for every d first) until ``--budget`` is spent; the
autotuner's choices and the registers and spills of every compiled forward and T3 variant are written
at the end. Writes ``kernel_table.csv`` (long format), ``kernel_table.md`` and ``kernel_resources.txt``.

``KERNEL_TABLE_GRID=t1guard`` runs a short grid (Base, <=T1, <=T2 at d = 64, 96 and 128, r = 0.3, and d = 128
at r = 0.1): run it in a second process with ``FLASHSTATS_T1_GUARD=always`` (or ``select``) to compare T1's
ways of skipping zero weights (the default clamps on masked tiles only).
"""

from __future__ import annotations

import math
import os

import torch
from _attn_providers import make_inputs, ours, sdpa_provider
from _perf import Deadline, LongCsv, bench_ms, command_line, markdown_table, parse_args

DIMS = (64, 80, 96, 128, 256)
POINTS = (
    [(16384, 0.3, d, 8) for d in DIMS]
    + [(32768, 0.3, d, 8) for d in DIMS]
    + [(n, r, d, 8) for n in (16384, 32768) for r in (0.1, 0.5) for d in DIMS]
    + [(16384, 0.3, 96, 32)]  # MHA last: its variants are compiled on demand (not precompiled)
)
T1_GUARD_POINTS = [(16384, 0.3, 64, 8), (16384, 0.3, 128, 8), (16384, 0.1, 128, 8), (16384, 0.3, 96, 8)] + [
    (32768, 0.3, d, 8) for d in (64, 128)
]


def _padded(fn):
    """``fn`` with the head dim zero-padded to a power of two (``FLASHSTATS_SPLIT_D=0``, read per call)."""

    def run():
        os.environ["FLASHSTATS_SPLIT_D"] = "0"
        try:
            return fn()
        finally:
            os.environ.pop("FLASHSTATS_SPLIT_D", None)

    return run


def providers(d: int) -> tuple[str, ...]:
    """What is timed at head dim ``d``: the tiers, T3 where it has a target, the padded Base where split."""
    from flashstats_kernels.ops.forward.fused import split_head_dim

    if os.environ.get("KERNEL_TABLE_GRID") == "t1guard":
        return ("base", "t1", "t2", "fa2_block")
    names = ("base", "t1", "t2") + (("t3",) if d in T3_MAX else ()) + ("fa2_block",)
    return names + (("base_pad",) if split_head_dim(d)[1] else ())


def measure(csv: LongCsv, length: int, ratio: float, d: int, kv_heads: int) -> None:
    rows = max(1, round(ratio * length))
    q, k, v = make_inputs(length, rows, d, q_heads=32, kv_heads=kv_heads)
    times = {}
    for name in providers(d):
        try:
            if name == "fa2_block":
                fn = sdpa_provider(name, q, k, v, rows)
            else:
                fn = _padded(ours("base", q, k, v, rows)) if name == "base_pad" else ours(name, q, k, v, rows)
            times[name] = bench_ms(fn)
        except RuntimeError as err:  # a backend that refuses the shape
            print(f"  {name} L={length} d={d}: {str(err).splitlines()[0][:120]}")
            times[name] = math.nan
    for name, ms in times.items():
        csv.add(L=length, r=ratio, R=rows, d=d, kv_heads=kv_heads, provider=name, ms=f"{ms:.4f}",
                vs_base=f"{ms / times['base']:.3f}")  # fmt: skip
    print(f"L={length} r={ratio} d={d} Hkv={kv_heads} " + " ".join(f"{n}={t:.3f}" for n, t in times.items()),
          flush=True)  # fmt: skip
    del q, k, v
    torch.cuda.empty_cache()


# the kernel table's reference bounds: (<=T1 / Base, <=T2 / Base, <=T3 / Base) bounds per d
T1_MAX = {128: 1.05}
T2_MAX = {128: 1.07}
T3_MAX = {64: 1.6, 128: 1.45}


def write_markdown(csv, path) -> None:
    by: dict = {}
    for r in csv.rows:
        by.setdefault((int(r["d"]), int(r["kv_heads"]), int(r["L"]), float(r["r"])), {})[r["provider"]] = r
    head = ["d", "Hq/Hkv", "L", "r", "Base ms", "Base vs FA2 block (>= 1.3)", "T1/Base", "T2/Base", "T3/Base",
            "padded Base/Base", "met"]  # fmt: skip
    out = []
    for (d, hkv, length, ratio), p in sorted(by.items()):
        base = float(p["base"]["ms"])
        speed = float(p["fa2_block"]["ms"]) / base
        t1, t2 = float(p["t1"]["vs_base"]), float(p["t2"]["vs_base"])
        checks = {"base": speed >= 1.3, "t1": t1 <= T1_MAX.get(d, 1.08), "t2": t2 <= T2_MAX.get(d, 1.10)}
        if d in T3_MAX and "t3" in p:
            checks["t3"] = float(p["t3"]["vs_base"]) <= T3_MAX[d]
        missed = [k for k, ok in checks.items() if not ok]
        out.append([d, f"32/{hkv}", length, ratio, f"{base:.3f}", f"{speed:.2f}", p["t1"]["vs_base"],
                    p["t2"]["vs_base"], p.get("t3", {}).get("vs_base", "-"),
                    p.get("base_pad", {}).get("vs_base", "-"),
                    "all" if not missed else "missed: " + ", ".join(missed)])  # fmt: skip
    env = csv.env
    text = f"# Kernel table ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
    text += command_line()
    pin = os.environ.get("FLASHSTATS_CONFIG_INDEX") or ""
    tiles = f"tuning candidate {pin} of each head-dim class (pinned)" if pin else "autotuned"
    guard = os.environ.get("FLASHSTATS_T1_GUARD") or "masked"
    text += f"bf16, batch 1; median of `triton.testing.do_bench`; tiles: {tiles}; "
    text += f"T1 zero-weight guard: {guard}.\n\n"
    text += (
        "`padded Base/Base`: the Base kernel with the head dim zero-padded to 128 (`FLASHSTATS_SPLIT_D=0`)"
    )
    text += " over the split one (d = 80 as 64 + 16, d = 96 as 64 + 32).\n\n"
    path.write_text(text + markdown_table(head, out))


def plot(csv, path) -> None:
    """``kernel_table.png``: each tier over Base and SDPA-FA2's time over Base, per head dim (r = 0.3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, length in zip(axes, (16384, 32768), strict=True):
        rows = [
            r for r in csv.rows if int(r["L"]) == length and float(r["r"]) == 0.3 and int(r["kv_heads"]) == 8
        ]
        dims = sorted({int(r["d"]) for r in rows})
        for name in ("t1", "t2", "t3", "base_pad", "fa2_block"):
            at = {int(r["d"]): float(r["vs_base"]) for r in rows if r["provider"] == name}
            y = [at.get(d, math.nan) for d in dims]
            label = {"fa2_block": "SDPA-FA2 block", "base_pad": "padded Base"}.get(name, f"<={name.upper()}")
            ax.plot([str(d) for d in dims], y, marker="o", label=label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(f"L = {length // 1024}K, r = 0.3")
        ax.set_xlabel("head dim d")
    axes[0].set_ylabel("time / Base")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = ("L", "r", "R", "d", "kv_heads", "provider", "ms", "vs_base")
    csv = LongCsv(args.out / "kernel_table.csv", fields)
    deadline = Deadline(args.budget)
    grid = T1_GUARD_POINTS if os.environ.get("KERNEL_TABLE_GRID") == "t1guard" else POINTS
    for length, ratio, d, hkv in [(4096, 0.3, 64, 8)] if args.quick else grid:
        if deadline.over():
            print("budget spent: stopping early")
            break
        measure(csv, length, ratio, d, hkv)
        write_markdown(csv, args.out / "kernel_table.md")
    csv.close()
    write_markdown(csv, args.out / "kernel_table.md")
    from kernel_resources import compiled_resources

    (args.out / "kernel_resources.txt").write_text("\n".join(compiled_resources()) + "\n")
    plot(csv, args.out / "kernel_table.png")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        from _perf import LoadedCsv

        src = Path(sys.argv[2])
        data = LoadedCsv(src, ints=("L", "R", "d", "kv_heads"))
        write_markdown(data, src.parent / "kernel_table.md")
        plot(data, src.parent / "kernel_table.png")
    else:
        main()
