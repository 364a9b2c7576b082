"""Pooling of per-token statistics over the answer tokens: the one implementation and its names.

Both the graph-captured recorder (`flashstats_hf.graphs`, pooled inside each layer) and
halluprobe's per-example records pool with `pool_tokens`, in the order of `POOL_NAMES`.
"""

from __future__ import annotations

import torch

__all__ = ["POOL_NAMES", "pool_tokens"]

POOL_NAMES: tuple[str, ...] = ("mean", "std", "min", "max")
"""Order of the last axis of pooled statistics (the standard deviation is the population one)."""


def pool_tokens(x: torch.Tensor, dim: int, keep: torch.Tensor | None = None) -> torch.Tensor:
    """mean, std (population), min, max of ``x`` along ``dim`` over the kept entries, on a new last axis.

    Args:
        x: ``[..., T, ...]`` float. Per-token values; pooled in ``x``'s dtype (upcast first for float64).
        dim: the token axis.
        keep: bool, broadcasting against ``x`` (size 1 on the other axes), True where a token counts;
            ``None``: every entry counts. A slice with no kept entry pools to mean 0, std 0, min +inf,
            max -inf.

    Returns:
        ``x``'s shape without ``dim``, plus a last axis of size 4 in `POOL_NAMES` order.
    """
    if keep is None:  # few kernels: inside a graph each costs a few microseconds, in every layer
        var, mean = torch.var_mean(x, dim, correction=0)
        low, high = torch.aminmax(x, dim=dim)
        return torch.stack([mean, var.sqrt(), low, high], dim=-1)
    n = keep.sum(dim).clamp(min=1)
    mean = torch.where(keep, x, 0.0).sum(dim) / n
    std = (torch.where(keep, x - mean.unsqueeze(dim), 0.0).square().sum(dim) / n).sqrt()
    low = torch.where(keep, x, float("inf")).amin(dim)
    high = torch.where(keep, x, float("-inf")).amax(dim)
    return torch.stack([mean, std, low, high], dim=-1)
