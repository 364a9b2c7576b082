"""Fill Triton's on-disk cache with every tuning candidate in parallel processes (saves device time).

The autotuner compiles its candidates one after another; compiling them first, one process per
candidate (``FLASHSTATS_CONFIG_INDEX`` pins it), turns minutes of serial compilation into seconds.
Each worker runs the four tiers once on a small input with the head layout of the benchmarks.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
import time

HEADS = ((32, 8), (16, 8))  # (query, KV) heads: the tier table and Qwen3-8B, Qwen3-0.6B


def _warm(job: tuple) -> str:
    if job[0] == "family":  # one family's attention variants at tuning candidate 0 (families.py)
        os.environ["FLASHSTATS_CONFIG_INDEX"] = "0"
        from families import warm

        t0 = time.perf_counter()
        warm(job[1])
        return f"family {job[1]}: {time.perf_counter() - t0:.1f}s"
    d, index, hq, hkv, split = job
    os.environ["FLASHSTATS_CONFIG_INDEX"] = str(index)
    import torch
    from flashstats_kernels import StatsRequest, response_attention

    t0 = time.perf_counter()
    length, rows = 1024, 300
    q = torch.randn(1, hq, length, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, hkv, length, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    for req in (StatsRequest(rows=False), StatsRequest(rows=True, lookups=True, columns=True)):
        response_attention(q[:, :, -rows:], k, v, request=req, backend="triton")
    if split:  # the T3 variant with half of its exponentials on the FMA pipes (kernel_table.py)
        os.environ["FLASHSTATS_T3_SPLIT_EXP"] = "1"
        response_attention(q[:, :, -rows:], k, v, request=StatsRequest(columns=True), backend="triton")
    torch.cuda.synchronize()
    return f"d={d} candidate={index} heads={hq}/{hkv} split={split}: {time.perf_counter() - t0:.1f}s"


def precompile(dims: tuple[int, ...] = (128, 64, 256), workers: int = 14, extra: tuple = ()) -> None:
    """Compile every candidate of the forward and key-major kernels for ``dims`` (bf16), and ``extra`` jobs.

    ``FLASHSTATS_PRECOMPILE_SPLIT=1`` adds the split-exponential T3 variant and the 32/32 heads at d = 96;
    ``FLASHSTATS_PRECOMPILE_CANDIDATES=1`` compiles tuning candidate 0 only (for pinned benchmarks).
    """
    split = os.environ.get("FLASHSTATS_PRECOMPILE_SPLIT") == "1"
    candidates = int(os.environ.get("FLASHSTATS_PRECOMPILE_CANDIDATES", "4"))  # 1: candidate 0 only
    heads = (*HEADS, (32, 32)) if split else HEADS
    jobs = list(extra) + [
        (d, i, hq, hkv, split)
        for d in dims
        for i in range(candidates)
        for hq, hkv in heads
        if d == 128 or hq == 32 and (hkv == 8 or d == 96)
    ]
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for line in pool.map(_warm, jobs):
            print(line, flush=True)
    print(f"precompiled {len(jobs)} jobs in {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    args = sys.argv[2:]
    families = tuple(("family", a.removeprefix("family:")) for a in args if a.startswith("family:"))
    dims = tuple(int(a) for a in args if not a.startswith("family:")) or (() if families else (128, 64, 256))
    precompile(dims, workers=int(sys.argv[1]) if len(sys.argv) > 1 else 14, extra=families)
