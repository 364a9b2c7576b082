"""Registers, spills, shared memory and occupancy of the compiled forward kernels, Base against <=T1.

Runs Base and <=T1 (autotuned) at d = 128 on L = 16K with r = 0.1 and 0.3, then reads every compiled
variant of the forward kernel from Triton's cache: constexprs (tile sizes, ``ROWS``), warps, stages,
registers per thread, spills and shared memory, and the CTAs per SM they allow on an H200 (64K registers,
228 KiB shared memory per SM), and the autotuner's choice per key. Writes ``kernel_resources.txt``.
"""

from __future__ import annotations

import torch
from _attn_providers import make_inputs, ours
from _perf import parse_args

REGS_PER_SM, SMEM_PER_SM = 65536, 232448


def main() -> None:
    import flashstats_kernels.ops.forward.fused as fwd

    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [f"{torch.cuda.get_device_name()} torch {torch.__version__}"]
    for length, ratio in ((16384, 0.1), (16384, 0.3)):
        rows = round(ratio * length)
        q, k, v = make_inputs(length, rows, 128)
        for tier in ("base", "t1"):
            ours(tier, q, k, v, rows)()
        torch.cuda.synchronize()
        lines.append(
            f"L={length} r={ratio}: R={rows}, row tiles of 128 x 32 heads = {-(-rows // 128) * 32} CTAs"
        )
    for key, cfg in fwd._tuned_forward(128).cache.items():
        lines.append(f"autotuned: key={key} -> {cfg}")
    for cache in fwd._fwd_kernel.device_caches.values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for key, kernel in kernels.items():
            try:
                kernel._init_handles()
                md = kernel.metadata
                by_regs = REGS_PER_SM // max(1, kernel.n_regs * 32 * md.num_warps)
                by_smem = SMEM_PER_SM // max(1, md.shared)
                consts = dict(getattr(kernel.src, "constants", {}))
                lines.append(
                    f"warps={md.num_warps} stages={md.num_stages} regs={kernel.n_regs} "
                    f"spills={kernel.n_spills} shared={md.shared} CTAs/SM by regs={by_regs} "
                    f"by smem={by_smem} consts={consts} key={str(key)[:300]}"
                )
            except Exception as err:  # a Triton version with other internals: say what is there
                lines.append(f"could not read {type(kernel).__name__}: {err!r}; key={str(key)[:300]}")
    text = "\n".join(lines) + "\n"
    (args.out / "kernel_resources.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
