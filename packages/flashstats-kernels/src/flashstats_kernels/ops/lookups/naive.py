"""Readable fp64 reference of the T2 lookups: log-diagonal, previous-token weight, sink weights.

It reads the lookups off the materialised probabilities of `naive_probabilities`.
"""

from __future__ import annotations

import math

import torch

from flashstats_kernels.ops.forward.naive import naive_probabilities
from flashstats_kernels.types import LookupStats


def naive_lookups_from_probs(
    p: torch.Tensor,
    s: torch.Tensor,
    lse: torch.Tensor,
    visible: torch.Tensor,
    *,
    prompt_len: torch.Tensor,
    sink_positions: torch.Tensor,
    diag_eps: float,
) -> LookupStats:
    """T2 statistics (float64) from materialised ``p [B, Hq, R, L]``, ``s``, ``lse`` and ``visible``."""
    b, hq, r, seq = p.shape
    rows = torch.arange(r, device=p.device)
    pos = seq - r + rows  # [R]
    floor = math.log(diag_eps)
    log_p_diag = s[:, :, rows, pos] - lse  # [B, Hq, R]
    diag_visible = visible[:, :, rows, pos] & (lse != float("-inf"))  # [B, Hq, R]
    diag_log = torch.where(diag_visible, log_p_diag.clamp(min=floor), floor)
    prev = (pos - 1).clamp(min=0)
    has_prev = pos[None, :] > prompt_len[:, None]  # [B, R]
    prev_weight = torch.where(has_prev[:, None, :], p[:, :, rows, prev], 0.0)
    in_range = (sink_positions >= 0) & (sink_positions < seq)  # [B, S]
    idx = sink_positions.clamp(0, seq - 1)  # [B, S]
    gathered = torch.gather(p, 3, idx[:, None, None, :].expand(b, hq, r, idx.shape[1]))  # [B, Hq, R, S]
    sink_weights = torch.where(in_range[:, None, None, :], gathered, 0.0)
    return LookupStats(diag_log=diag_log, prev_weight=prev_weight, sink_weights=sink_weights)


def naive_lookups(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    sink_positions: torch.Tensor,
    diag_eps: float,
) -> LookupStats:
    """fp64 T2 lookups of the response rows (arguments as in `naive_forward`).

    Args:
        q: [B, Hq, R, D]. queries.
        k: [B, Hkv, L, D]. keys.
        key_mask: [B, L] bool or None.
        prompt_len: [B] int64.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        sink_positions: [B, S] int64. key positions to read (outside ``[0, L)`` reads 0).
        diag_eps: ``diag_log`` is clamped below at ``log(diag_eps)``.

    Returns:
        LookupStats of float64 tensors.
    """
    s, visible, lse, p = naive_probabilities(
        q, k, key_mask=key_mask, scale=scale, softcap=softcap, window=window
    )
    return naive_lookups_from_probs(
        p, s, lse, visible, prompt_len=prompt_len, sink_positions=sink_positions, diag_eps=diag_eps
    )
