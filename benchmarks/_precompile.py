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


def _warm(job: tuple[int, int, int, int]) -> str:
    d, index, hq, hkv = job
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
    torch.cuda.synchronize()
    return f"d={d} candidate={index} heads={hq}/{hkv}: {time.perf_counter() - t0:.1f}s"


def precompile(dims: tuple[int, ...] = (128, 64, 256), workers: int = 14) -> None:
    """Compile every candidate of the forward and key-major kernels for ``dims`` (bf16)."""
    jobs = [(d, i, hq, hkv) for d in dims for i in range(4) for hq, hkv in HEADS if d == 128 or hq == 32]
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for line in pool.map(_warm, jobs):
            print(line, flush=True)
    print(f"precompiled {len(jobs)} jobs in {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    dims = tuple(int(a) for a in sys.argv[2:]) or (128, 64, 256)
    precompile(dims, workers=int(sys.argv[1]) if len(sys.argv) > 1 else 14)
