"""Pooling of per-token statistics over the answer tokens, and the top-k reduction of column means.

Both the graph-captured recorder (`flashstats_hf.graphs`, pooled inside each layer) and
halluprobe's per-example records pool with `pool_tokens`, in the order of `POOL_NAMES`. Recorded
forwards reduce each layer's column means with `column_topk` before the next layer runs.
"""

from __future__ import annotations

import torch

from flashstats_hf.types import ColumnTopK

__all__ = ["COLUMN_TOPK", "POOL_NAMES", "column_topk", "pool_tokens"]

COLUMN_TOPK = 16
"""Column means kept per head and layer when a forward reduces its columns (``record_forward``'s default)."""

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


def column_topk(mean: torch.Tensor, keep: torch.Tensor | None, k: int) -> ColumnTopK:
    """The ``k`` largest column means of each head over the real keys, descending.

    Args:
        mean: ``[B, Hq, L] float32``. Column means ``c̄_j`` of one layer, indexed by padded key position.
        keep: ``[B, L] bool`` True on real keys, or None when every key is real.
        k: how many to keep (>= 1).

    Returns:
        ColumnTopK: ``[B, Hq, k]`` values and key positions; where an example has fewer than ``k`` real
        keys, the slots past them hold value 0 and index -1.
    """
    b, h, length = mean.shape
    masked = mean if keep is None else torch.where(keep[:, None, :], mean, float("-inf"))
    values, index = masked.topk(min(k, length), dim=-1)  # [B, Hq, k']
    if k > length:
        values = torch.nn.functional.pad(values, (0, k - length), value=float("-inf"))
        index = torch.nn.functional.pad(index, (0, k - length), value=-1)
    real = values != float("-inf")
    return ColumnTopK(values=torch.where(real, values, 0.0).float(), index=torch.where(real, index, -1))
