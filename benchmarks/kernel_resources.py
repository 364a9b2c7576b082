"""Registers, spills, shared memory and occupancy of the compiled forward kernels, Base against <=T1.

Runs Base and <=T1 (autotuned) at d = 128 on L = 16K with r = 0.1 and 0.3, then reads every compiled
variant of the forward (and key-major T3) kernel from Triton's cache: named constexprs (tile sizes,
``ROWS``, ``BLOCK_D`` / ``BLOCK_DT``), warps, stages, registers per thread, spills and shared memory, and
the CTAs per SM they allow on an H200 (64K registers, 228 KiB shared memory per SM), and the
autotuner's choice per key. Writes ``kernel_resources.txt``. `compiled_resources` is what
``kernel_table.py`` writes after its grid.
"""

from __future__ import annotations

import torch
from _attn_providers import make_inputs, ours
from _perf import parse_args

REGS_PER_SM, SMEM_PER_SM = 65536, 232448
SHOWN = ("D", "GROUP", "ROWS", "HAS_MASK", "HAS_SOFTCAP", "HAS_WINDOW", "BLOCK_M", "BLOCK_N", "BLOCK_D",
         "BLOCK_DT", "SPLIT_EXP")  # fmt: skip


def _named_constants(kernel) -> dict:
    """The compiled variant's constexprs by parameter name (Triton keys them by argument index)."""
    src = kernel.src
    names = getattr(src.fn, "arg_names", [])
    out = {}
    for key, value in dict(getattr(src, "constants", {})).items():
        idx = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        name = names[idx] if isinstance(idx, int) and idx < len(names) else str(key)
        if name in SHOWN:
            out[name] = value
    return out


def _variants(jit_fn, label: str) -> list[str]:
    lines = []
    for cache in jit_fn.device_caches.values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for key, kernel in kernels.items():
            try:
                kernel._init_handles()
                md = kernel.metadata
                by_regs = REGS_PER_SM // max(1, kernel.n_regs * 32 * md.num_warps)
                by_smem = SMEM_PER_SM // max(1, md.shared)
                lines.append(
                    f"{label}: warps={md.num_warps} stages={md.num_stages} regs={kernel.n_regs} "
                    f"spills={kernel.n_spills} shared={md.shared} CTAs/SM by regs={by_regs} "
                    f"by smem={by_smem} "
                    f"{_named_constants(kernel)}"
                )
            except Exception as err:  # a Triton version with other internals: say what is there
                lines.append(
                    f"{label}: could not read {type(kernel).__name__}: {err!r}; key={str(key)[:200]}"
                )
    return lines


def compiled_resources() -> list[str]:
    """One line per autotuner choice and per compiled forward / T3 variant in this process."""
    import flashstats_kernels.ops.columns.fused as cols
    import flashstats_kernels.ops.forward.fused as fwd

    lines = [f"{torch.cuda.get_device_name()} torch {torch.__version__}"]
    for dc in (64, 96, 128, 256):
        for key, cfg in fwd._tuned_forward(dc).cache.items():
            lines.append(f"forward table {dc} autotuned: key={key[:8]} -> {cfg}")
        for key, cfg in cols._tuned_columns(dc).cache.items() if dc != 96 else ():
            lines.append(f"columns d-class {dc} autotuned: key={key[:8]} -> {cfg}")
    return lines + _variants(fwd._fwd_kernel, "forward") + _variants(cols._columns_kernel, "columns")


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    for length, ratio in ((16384, 0.1), (16384, 0.3)):
        rows = round(ratio * length)
        q, k, v = make_inputs(length, rows, 128)
        for tier in ("base", "t1"):
            ours(tier, q, k, v, rows)()
        torch.cuda.synchronize()
        lines.append(
            f"L={length} r={ratio}: R={rows}, row tiles of 128 x 32 heads = {-(-rows // 128) * 32} CTAs"
        )
    text = "\n".join(compiled_resources() + lines) + "\n"
    (args.out / "kernel_resources.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
