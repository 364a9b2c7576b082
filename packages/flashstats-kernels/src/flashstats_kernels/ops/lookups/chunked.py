"""Pure-PyTorch T2 lookups: re-evaluate a few scores per row and read their weights off the stored LSE.

Work and memory are ``O(B * Hq * R * (2 + S) * D)``: nothing of size ``L`` per row.
"""

from __future__ import annotations

import math

import torch

from flashstats_kernels.ops._tiles import accumulate_dtype, group_queries, visible_at
from flashstats_kernels.types import LookupStats


def _scores_at(
    qg: torch.Tensor, k: torch.Tensor, key: torch.Tensor, *, scale: float, softcap: float | None
) -> torch.Tensor:
    """Scores of every row against the keys at positions ``key``.

    Args:
        qg: [B, Hkv, G, R, D]. grouped queries.
        k: [B, Hkv, L, D]. keys (accumulate dtype).
        key: [B, R, K] int64. positions in ``[0, L)`` (already clamped).
        scale: score scale.
        softcap: soft cap or None.

    Returns:
        [B, Hkv, G, R, K] scores.
    """
    b, hkv, _, d = k.shape
    r, kk = key.shape[1], key.shape[2]
    idx = key.reshape(b, 1, r * kk, 1).expand(b, hkv, r * kk, d)
    kg = torch.gather(k, 2, idx).view(b, hkv, 1, r, kk, d)  # [B, Hkv, 1, R, K, D]
    s = torch.einsum("bhgrd,bhgrkd->bhgrk", qg, kg) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return s


def lookups_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    sink_positions: torch.Tensor,
    diag_eps: float,
) -> LookupStats:
    """T2 lookups in PyTorch (the arguments of the Triton ``lookups_triton``).

    Args:
        q: [B, Hq, R, D]. queries; any strides.
        k: [B, Hkv, L, D]. keys; any strides.
        lse: [B, Hq, R] float32. the LSE that the forward wrote.
        key_mask: [B, L] bool or None.
        prompt_len: [B] int64.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        sink_positions: [B, S] int64. key positions to read; outside ``[0, L)`` reads 0.
        diag_eps: ``diag_log`` is clamped below at ``log(diag_eps)``.

    Returns:
        LookupStats: diag_log and prev_weight ``[B, Hq, R]``, sink_weights ``[B, Hq, R, S]``, float32.

    Shape:
        q: [B, Hq, R, D]; k: [B, Hkv, L, D]; lse: [B, Hq, R]; sink_positions: [B, S].
    """
    b, hq, r, _ = q.shape
    hkv, seq = k.shape[1], k.shape[2]
    acc = accumulate_dtype(q.dtype)
    qg = group_queries(q, hkv, acc)  # [B, Hkv, G, R, D]
    kc = k.to(acc)
    pos = torch.arange(seq - r, seq, device=q.device)[:, None]  # [R, 1]
    s_n = sink_positions.shape[1]
    own = pos[None].expand(b, r, 1)  # [B, R, 1]
    # [B, R, 2 + S]: the row's own position, the previous position, the sinks
    key = torch.cat([own, own - 1, sink_positions[:, None, :].expand(b, r, s_n)], dim=2)
    vis = visible_at(pos, key, keys=seq, key_mask=key_mask, window=window)  # [B, R, 2 + S]
    s = _scores_at(qg, kc, key.clamp(0, seq - 1), scale=scale, softcap=softcap)  # [B, Hkv, G, R, 2 + S]
    log_p = (s - lse.unflatten(1, (hkv, hq // hkv)).to(acc)[..., None]).flatten(1, 2)  # [B, Hq, R, 2 + S]
    # a row with lse = -inf has no weight anywhere (it sees no key, or only -inf scores): it reads 0
    vis = vis[:, None] & (lse != float("-inf"))[..., None]  # [B, Hq, R, 2 + S]
    floor = math.log(diag_eps)
    diag_log = torch.where(vis[..., 0], log_p[..., 0].clamp(min=floor), floor)
    weights = torch.where(vis[..., 1:], torch.exp(torch.where(vis[..., 1:], log_p[..., 1:], 0.0)), 0.0)
    has_prev = (pos[:, 0][None, :] > prompt_len[:, None])[:, None]  # [B, 1, R]
    prev_weight = torch.where(has_prev, weights[..., 0], 0.0)
    return LookupStats(
        diag_log=diag_log.float(), prev_weight=prev_weight.float(), sink_weights=weights[..., 1:].float()
    )
