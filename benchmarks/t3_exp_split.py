"""A cheaper T3? <=T3 with a share of its exponentials on the FMA pipes (FlashAttention-4's split).

The key-major T3 pass evaluates one ``exp2`` per (response row, key) pair on the special-function unit
(16 per clock per SM on Hopper, against 128 FP32 operations). ``FLASHSTATS_T3_SPLIT_EXP=k`` moves the last
1 / k of each query tile's columns to a degree-5 polynomial on the FMA pipes (`exp2_fma`, split in registers:
`exp2_row_sums`). This times Base, <=T2 and <=T3 for k = 0 (off), 2, 4, 8, side by side in one process,
autotuned (each variant over the same tile candidates), at d = 64 and 128, L = 16K and 32K, r = 0.1 and 0.3,
32 query / 8 KV heads, bf16. Writes ``t3_exp_split.csv``.
"""

from __future__ import annotations

import os

from _attn_providers import make_inputs, ours
from _perf import Deadline, LongCsv, bench_ms, parse_args

SPLITS = ("0", "2", "4", "8")


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "t3_exp_split.csv", ("L", "R", "d", "variant", "ms", "vs_base"))
    deadline = Deadline(args.budget)
    grid = (
        [(64, 4096, 0.3)]
        if args.quick
        else [(d, n, r) for r in (0.3, 0.1) for d in (64, 128) for n in (16384, 32768)]  # r = 0.3 first
    )
    for head_dim, length, ratio in grid:
        if deadline.over():
            break
        rows = round(ratio * length)
        q, k, v = make_inputs(length, rows, head_dim)
        os.environ["FLASHSTATS_T3_SPLIT_EXP"] = "0"
        base = bench_ms(ours("base", q, k, v, rows))
        t2 = bench_ms(ours("t2", q, k, v, rows))
        point = dict(L=length, R=rows, d=head_dim)
        csv.add(**point, variant="base", ms=f"{base:.4f}", vs_base="1.000")
        csv.add(**point, variant="t2", ms=f"{t2:.4f}", vs_base=f"{t2 / base:.3f}")
        for split in SPLITS:
            os.environ["FLASHSTATS_T3_SPLIT_EXP"] = split
            ms = bench_ms(ours("t3", q, k, v, rows))
            csv.add(**point, variant=f"t3_split{split}", ms=f"{ms:.4f}", vs_base=f"{ms / base:.3f}")
            print(f"d={head_dim} L={length} r={ratio} T3 split {split}: {ms:.3f} ms, {ms / base:.3f} x Base "
                  f"(T2 {t2 / base:.3f})", flush=True)  # fmt: skip
        os.environ["FLASHSTATS_T3_SPLIT_EXP"] = "0"
        del q, k, v
    csv.close()


if __name__ == "__main__":
    main()
