"""Fill Triton's on-disk cache with every tuning candidate in parallel processes (saves device time).

The autotuner compiles its candidates one after another; compiling them first, one process per
candidate (``FLASHSTATS_CONFIG_INDEX`` pins it), turns minutes of serial compilation into seconds.
Each worker runs the tiers once on a small input with the head layout of the benchmarks: Base, and
<=T2 (rows and lookups); the key-major T3 kernel only at the head dims in ``T3_DIMS`` (where the kernel
table times it); at a head dim that the forward splits (d = 80, 96) also the padded Base
(``FLASHSTATS_SPLIT_D=0``) that the kernel table compares with.

    python3 _precompile.py WORKERS [D ...] [family:NAME ...]

``FLASHSTATS_PRECOMPILE_CANDIDATES=N`` compiles tuning candidates ``0 .. N-1`` (default 5: all of them,
the longest table has five; 1 for benchmarks pinned to candidate 0).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
import time

HEADS = ((32, 8), (16, 8))  # (query, KV) heads: the tier table and Qwen3-8B, Qwen3-0.6B
T3_DIMS = (64, 128)  # head dims where the kernel table times <=T3


def _warm_family(name: str, index: int) -> str:
    os.environ["FLASHSTATS_CONFIG_INDEX"] = str(index)
    from families import warm

    t0 = time.perf_counter()
    warm(name)
    return f"family {name} candidate={index}: {time.perf_counter() - t0:.1f}s"


def _warm(job: tuple) -> str:
    try:
        return _warm_one(job)
    except Exception as err:  # one failing variant must not stop the others; the benchmark reports it
        return f"{job}: FAILED {type(err).__name__}: {str(err).splitlines()[0][:200]}"


def _warm_one(job: tuple) -> str:
    if job[0] == "family":  # one family's attention variants at one tuning candidate (families.py)
        return _warm_family(job[1], job[2])
    d, index, hq, hkv = job
    os.environ["FLASHSTATS_CONFIG_INDEX"] = str(index)
    import torch
    from flashstats_kernels import StatsRequest, response_attention
    from flashstats_kernels.ops.forward.fused import split_head_dim

    t0 = time.perf_counter()
    length, rows = 1024, 300
    q = torch.randn(1, hq, length, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, hkv, length, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    full = StatsRequest(rows=True, lookups=True, columns=d in T3_DIMS)
    for req in (StatsRequest(rows=False), full):
        response_attention(q[:, :, -rows:], k, v, request=req, backend="triton")
    if split_head_dim(d)[1]:  # the padded Base of a split head dim (kernel_table.py's base_pad)
        os.environ["FLASHSTATS_SPLIT_D"] = "0"
        response_attention(q[:, :, -rows:], k, v, request=StatsRequest(rows=False), backend="triton")
        os.environ.pop("FLASHSTATS_SPLIT_D")
    torch.cuda.synchronize()
    return f"d={d} candidate={index} heads={hq}/{hkv}: {time.perf_counter() - t0:.1f}s"


def precompile(
    dims: tuple[int, ...] = (128, 64, 256), workers: int = 14, families: tuple[str, ...] = ()
) -> None:
    """Compile the tuning candidates of the kernels that ``dims`` and ``families`` need (bf16).

    Head-dim jobs run first (32 / 8 heads; 16 / 8 too at d = 128), then one job per family and candidate.
    """
    candidates = int(os.environ.get("FLASHSTATS_PRECOMPILE_CANDIDATES", "5"))
    jobs: list[tuple] = [
        (d, i, hq, hkv) for d in dims for i in range(candidates) for hq, hkv in HEADS if d == 128 or hq == 32
    ]
    jobs += [("family", name, i) for name in families for i in range(candidates)]
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for line in pool.map(_warm, jobs):
            print(f"{time.perf_counter() - t0:6.1f}s {line}", flush=True)
    print(f"precompiled {len(jobs)} jobs in {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    args = sys.argv[2:]
    families = tuple(a.removeprefix("family:") for a in args if a.startswith("family:"))
    dims = tuple(int(a) for a in args if not a.startswith("family:")) or (() if families else (128, 64, 256))
    precompile(dims, workers=int(sys.argv[1]) if len(sys.argv) > 1 else 14, families=families)
