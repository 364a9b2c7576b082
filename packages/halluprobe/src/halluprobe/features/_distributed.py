"""Data-parallel extraction on ``torch.distributed`` (one process per device, started by ``torchrun``).

Every process plans the same length-sorted batches ([`plan_batches`][halluprobe.plan_batches]),
takes its share by a deterministic length-aware rule ([`shard_batches`][halluprobe.shard_batches])
and writes its records to its own part of the cache (``cache/parts/rank-NNNNN/``); rank 0 then
lists every part in the cache index. A process that dies loses at most its batch in flight: a rerun
(with any number of processes) first merges the parts left behind, then computes only what is
missing. Each batch is the same forward as in a one-process run, so the records, and the detectors
trained on them, are the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ATTENTION_TOKENS = 4096
"""Cost model of a forward: ``n + n^2 / ATTENTION_TOKENS`` per example of ``n`` tokens (linear layers, then
attention, which matches the linear part at this length on the proxies we use)."""


@dataclass(frozen=True)
class World:
    """This process's place in a distributed run (a world of one outside ``torchrun``)."""

    rank: int = 0
    """Global rank."""
    size: int = 1
    """Number of processes."""
    local_rank: int = 0
    """Rank on this node (the CUDA device index)."""
    backend: str | None = None
    """``"gloo"`` or ``"nccl"``; None in a world of one."""

    @property
    def main(self) -> bool:
        """Whether this is rank 0 (the one that merges, trains and reports)."""
        return self.rank == 0

    def barrier(self) -> None:
        """Waits for every process (nothing to wait for in a world of one)."""
        if self.size > 1:
            import torch.distributed as dist

            if self.backend == "nccl":
                dist.barrier(device_ids=[self.local_rank])
            else:
                dist.barrier()

    def device(self, device: str) -> str:
        """``device`` with this process's CUDA index (``"cuda"`` -> ``"cuda:<local rank>"``)."""
        return f"cuda:{self.local_rank}" if self.size > 1 and device == "cuda" else device


def init_world(device: str) -> World:
    """Joins the process group that ``torchrun`` describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``).

    Args:
        device: the run's device: ``gloo`` serves CPU runs, ``nccl`` CUDA runs.

    Returns:
        This process's [`World`][halluprobe.World]; a world of one when ``WORLD_SIZE`` is unset or 1.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if not dist.is_initialized():
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
    return World(rank=rank, size=size, local_rank=local, backend=backend)


def close_world(world: World) -> None:
    """Leaves the process group (nothing to do in a world of one)."""
    if world.size > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def batch_cost(lengths: Sequence[int]) -> float:
    """Estimated cost of one packed forward over examples of these token lengths."""
    return float(sum(n + n * n / ATTENTION_TOKENS for n in lengths))


def shard_batches(costs: Sequence[float], size: int) -> list[list[int]]:
    """Assigns batches to ``size`` ranks so that they finish together (longest first, least loaded rank).

    Deterministic: ties between costs go to the earlier batch, ties between loads to the lower rank.

    Returns:
        For each rank, its batch indices in ascending order.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    loads = [0.0] * size
    owned: list[list[int]] = [[] for _ in range(size)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(size), key=lambda r: (loads[r], r))
        loads[rank] += costs[i]
        owned[rank].append(i)
    return [sorted(batches) for batches in owned]


def my_batches(lengths: Sequence[Sequence[int]], world: World) -> list[int]:
    """Indices of the planned batches (token lengths of their examples) that this rank computes."""
    return shard_batches([batch_cost(n) for n in lengths], world.size)[world.rank]


def run_shard(
    batches: list[list[Any]],
    compute: Callable[[list[Any]], list],
    cache,
    world: World,
    on_batch: Callable[[int], None] | None = None,
) -> None:
    """Computes this rank's batches into its cache part, then merges every part on rank 0.

    Args:
        batches: this rank's batches of examples (`my_batches` of the shared plan).
        compute: maps a batch to its records.
        cache: the [`FeatureCache`][halluprobe.FeatureCache] of the run.
        world: this process's place in the run.
        on_batch: called with the number of examples after each batch (progress).
    """
    part = cache.part(f"rank-{world.rank:05d}")
    for batch in batches:
        records = compute(batch)
        if [r.id for r in records] != [ex.id for ex in batch]:
            raise ValueError("compute must return one record per example, in batch order")
        part.add(records, [cache.key(ex) for ex in batch])  # content keys, as extract_records uses
        if on_batch is not None:
            on_batch(len(records))
    world.barrier()
    if world.main:
        cache.merge_parts()
    world.barrier()
    cache.refresh()


__all__ = ["World", "batch_cost", "close_world", "init_world", "my_batches", "run_shard", "shard_batches"]
