"""Helpers shared by the chunked pure-PyTorch ops: visibility, scores of a row tile, tile sizes."""

from __future__ import annotations

import torch

TILE_ELEMENTS = 1 << 22
"""Score elements per row tile (``B * Hq * C * L``): bounds each temporary of the chunked ops at 16 MiB."""


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 inputs accumulate in float64, everything else in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def tile_rows(batch: int, q_heads: int, rows: int, keys: int, tile: int | None) -> int:
    """Rows per tile so that one ``[B, Hq, C, L]`` temporary holds about `TILE_ELEMENTS` values."""
    if tile is not None:
        return max(1, min(rows, tile))
    return max(1, min(rows, TILE_ELEMENTS // max(1, batch * q_heads * keys)))


def visible_at(
    pos: torch.Tensor, key: torch.Tensor, *, keys: int, key_mask: torch.Tensor | None, window: int | None
) -> torch.Tensor:
    """Whether key ``key`` is visible from the row at position ``pos`` (same broadcast shape out).

    Args:
        pos: [..., R, 1] or [R, 1] int64. row positions ``p_i``.
        key: [B, R, K] or broadcastable int64. key positions (anything outside ``[0, L)`` is invisible).
        keys: L, the number of keys.
        key_mask: [B, L] bool or None.
        window: sliding window or None.

    Returns:
        [B, R, K] bool (the broadcast of ``pos`` and ``key``, with the batch dimension of ``key_mask``).
    """
    vis = (key >= 0) & (key < keys) & (key <= pos)
    if window is not None:
        vis = vis & (key > pos - window)
    if key_mask is not None:
        b = key_mask.shape[0]
        idx = key.clamp(0, keys - 1).expand(b, *vis.shape[-2:])  # [B, R, K]
        vis = vis & torch.gather(key_mask, 1, idx.reshape(b, -1)).view(idx.shape)
    return vis


def key_span(r0: int, r1: int, rows: int, keys: int, window: int | None) -> tuple[int, int]:
    """Keys ``k0 <= j < k1`` that any response row ``r0 <= i < r1`` can see (causal, window).

    Row ``i`` sits at ``p_i = L - R + i`` and sees keys ``p_i - w < j <= p_i``: keys after the last row
    and before the first row's window are never needed.
    """
    last = keys - rows + r1 - 1
    k0 = 0 if window is None else max(0, keys - rows + r0 - window + 1)
    return k0, last + 1


def tile_visibility(
    r0: int, r1: int, rows: int, keys: int, *, key_mask: torch.Tensor | None, window: int | None, device
) -> torch.Tensor:
    """Visibility of the response rows ``r0 <= i < r1``: ``[B or 1, C, L] bool``."""
    pos = torch.arange(keys - rows + r0, keys - rows + r1, device=device)[:, None]  # [C, 1]
    key = torch.arange(keys, device=device)[None, :]  # [1, L]
    vis = key <= pos
    if window is not None:
        vis = vis & (key > pos - window)
    vis = vis[None]  # [1, C, L]
    if key_mask is not None:
        vis = vis & key_mask[:, None, :]
    return vis


def tile_scores(qg: torch.Tensor, kt: torch.Tensor, *, scale: float, softcap: float | None) -> torch.Tensor:
    """Scores of one row tile.

    Args:
        qg: [B, Hkv, G, C, D] accumulate dtype. grouped queries of the tile.
        kt: [B, Hkv, 1, D, L] accumulate dtype. transposed keys.
        scale: score scale.
        softcap: soft cap or None.

    Returns:
        [B, Hkv, G, C, L] scaled (soft-capped) scores.
    """
    s = torch.matmul(qg, kt) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return s


def group_queries(q: torch.Tensor, kv_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """``[B, Hq, R, D]`` -> ``[B, Hkv, G, R, D]`` in ``dtype`` (a view when no cast is needed)."""
    return q.unflatten(1, (kv_heads, q.shape[1] // kv_heads)).to(dtype)
