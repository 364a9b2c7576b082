"""Readable fp64 reference of the T3 column sums and means over counted response rows."""

from __future__ import annotations

import torch

from flashstats_kernels.ops.forward.naive import naive_probabilities
from flashstats_kernels.types import ColumnStats


def naive_counted_rows(
    visible: torch.Tensor, *, key_mask: torch.Tensor | None, prompt_len: torch.Tensor
) -> torch.Tensor:
    """Rows that count in the column reductions.

    Args:
        visible: [B, 1, R, L] bool. the visibility of `naive_visibility`.
        key_mask: [B, L] bool or None.
        prompt_len: [B] int64.

    Returns:
        counted: ``[B, R] bool``: the row's position ``p_i >= prompt_len[b]``, the token at ``p_i`` is
        real, and the row sees at least one key.
    """
    b, _, r, seq = visible.shape
    pos = torch.arange(seq - r, seq, device=visible.device)  # [R]
    counted = (pos[None, :] >= prompt_len[:, None]) & visible[:, 0].any(-1)
    if key_mask is not None:
        counted = counted & key_mask[:, seq - r :]
    return counted


def naive_columns_from_probs(
    p: torch.Tensor, visible: torch.Tensor, *, key_mask: torch.Tensor | None, prompt_len: torch.Tensor
) -> ColumnStats:
    """T3 statistics (float64) from materialised ``p [B, Hq, R, L]`` and ``visible [B, 1, R, L]``."""
    counted = naive_counted_rows(visible, key_mask=key_mask, prompt_len=prompt_len)  # [B, R]
    total = (p * counted[:, None, :, None]).sum(2)  # [B, Hq, L]
    seen_by = (visible[:, 0] & counted[:, :, None]).sum(1).to(p.dtype)  # [B, L]
    mean = torch.where(seen_by[:, None, :] > 0, total / seen_by.clamp(min=1.0)[:, None, :], 0.0)
    return ColumnStats(sum=total, mean=mean)


def naive_columns(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
) -> ColumnStats:
    """fp64 T3 column sums and means (arguments as in `naive_forward`).

    Returns:
        ColumnStats of float64 ``[B, Hq, L]`` tensors.
    """
    _, visible, _, p = naive_probabilities(
        q, k, key_mask=key_mask, scale=scale, softcap=softcap, window=window
    )
    return naive_columns_from_probs(p, visible, key_mask=key_mask, prompt_len=prompt_len)
