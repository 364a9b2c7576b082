"""Is <=T1's overhead at d = 64 an occupancy limit? T1 per tile candidate, with and without a register cap.

At d = 64 the Base forward (128 x 64 tiles, 8 warps) needs 128 registers per thread, so two CTAs fit on
an SM; T1 needs about 173 and gets one (``kernel_resources.txt``). This times Base (autotuned) and <=T1
pinned to each forward tile candidate of the d = 64 class, as compiled and with ``maxnreg = 128`` (two
CTAs per SM, at the price of spills), on L = 16K and 32K with r = 0.3, 32 query / 8 KV heads, bf16.
Writes ``t1_registers.csv`` and prints each variant's registers and spills.
"""

from __future__ import annotations

import flashstats_kernels.ops.forward.fused as fwd
from _attn_providers import make_inputs, ours
from _perf import Deadline, LongCsv, bench_ms, parse_args
from kernel_resources import compiled_resources


def pinned(index: int, maxnreg: int | None, d_class: int = 64):
    """A `forward_config` replacement: one candidate of a head-dim class, optionally with a register cap."""
    bm, bn, warps, stages = fwd._FORWARD_TABLES[d_class][index][:4]
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
    if maxnreg is not None:
        cfg["maxnreg"] = maxnreg
    return lambda dtype, block_d, table=None: cfg


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "t1_registers.csv", ("L", "R", "d", "variant", "ms", "vs_base"))
    deadline = Deadline(args.budget)
    auto = fwd.forward_config
    for length in (16384, 32768):
        rows = round(0.3 * length)
        q, k, v = make_inputs(length, rows, 64)
        base = bench_ms(ours("base", q, k, v, rows))
        csv.add(L=length, R=rows, d=64, variant="base_auto", ms=f"{base:.4f}", vs_base="1.000")
        for name, cfg in [("t1_auto", auto)] + [
            (f"t1_cand{i}_maxnreg{m}", pinned(i, m)) for i in range(4) for m in (None, 128)
        ]:
            if deadline.over():
                break
            fwd.forward_config = cfg
            try:
                ms = bench_ms(ours("t1", q, k, v, rows))
            except Exception as err:  # a cap the compiler refuses: say so and go on
                print(f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:150]}", flush=True)
                continue
            finally:
                fwd.forward_config = auto
            csv.add(L=length, R=rows, d=64, variant=name, ms=f"{ms:.4f}", vs_base=f"{ms / base:.3f}")
            print(f"L={length} {name}: {ms:.3f} ms, {ms / base:.3f} x Base", flush=True)
        del q, k, v
    csv.close()
    lines = [line for line in compiled_resources() if "'D': 64" in line or "autotuned" in line]
    (args.out / "t1_registers.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
