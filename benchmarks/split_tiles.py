"""Tiles for the split head dims (d = 80, 96): Base per d = 128-class candidate, with and without a cap.

The split forward (d = 80 as 64 + 16, d = 96 as 64 + 32) runs the d = 128 class's tile candidates; the
autotuner picked 128 x 64 tiles with 154-168 registers (one CTA per SM). This times Base pinned to each
candidate, as compiled and with ``maxnreg = 128``, against SDPA-FA2 on the same response block, at L = 16K
and 32K with r = 0.3, 32 query / 8 KV heads, bf16. Writes ``split_tiles.csv`` and the variants' registers.
"""

from __future__ import annotations

import flashstats_kernels.ops.forward.fused as fwd
from _attn_providers import make_inputs, ours, sdpa_provider
from _perf import Deadline, LongCsv, bench_ms, parse_args
from kernel_resources import compiled_resources
from t1_registers import pinned


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "split_tiles.csv", ("L", "R", "d", "variant", "ms", "fa2_over"))
    deadline = Deadline(args.budget)
    auto = fwd.forward_config
    for length in (16384, 32768):
        for d in (80, 96):
            rows = round(0.3 * length)
            q, k, v = make_inputs(length, rows, d)
            fa2 = bench_ms(sdpa_provider("fa2_block", q, k, v, rows))
            # the autotuned Base is the fastest uncapped candidate: not timed again
            variants = [
                (f"base_cand{i}_maxnreg{m}", pinned(i, m, 128)) for i in range(4) for m in (None, 128)
            ]
            for name, cfg in variants:
                if deadline.over():
                    break
                fwd.forward_config = cfg
                try:
                    ms = bench_ms(ours("base", q, k, v, rows))
                except Exception as err:  # a cap the compiler refuses: say so and go on
                    print(f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:150]}", flush=True)
                    continue
                finally:
                    fwd.forward_config = auto
                csv.add(L=length, R=rows, d=d, variant=name, ms=f"{ms:.4f}", fa2_over=f"{fa2 / ms:.3f}")
                print(f"L={length} d={d} {name}: {ms:.3f} ms, FA2 / it = {fa2 / ms:.3f}", flush=True)
            del q, k, v
    csv.close()
    lines = [line for line in compiled_resources() if "'BLOCK_DT': 16" in line or "'BLOCK_DT': 32" in line]
    (args.out / "split_tiles.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
