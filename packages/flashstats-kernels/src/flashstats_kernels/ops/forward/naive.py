"""Readable fp64 reference of the response-stage forward: output, LSE and T1 row statistics.

It materialises the whole ``[B, Hq, R, L]`` response block in float64; use it on small inputs to
check the other backends. The definitions are those of ``SEMANTICS.md`` and ``docs/reference/t1.md``.
"""

from __future__ import annotations

import torch

from flashstats_kernels.types import RowStats


def naive_visibility(
    batch: int,
    rows: int,
    keys: int,
    *,
    key_mask: torch.Tensor | None,
    window: int | None,
    device: torch.device,
) -> torch.Tensor:
    """Which keys each response row sees.

    Returns:
        visible: ``[B, 1, R, L] bool``. Row ``i`` sits at position ``p_i = L - R + i`` and sees key
        ``j`` iff ``j <= p_i``, ``key_mask[b, j]`` and (with a window) ``p_i - window < j``.
    """
    pos = torch.arange(keys - rows, keys, device=device)[:, None]  # [R, 1]
    key = torch.arange(keys, device=device)[None, :]  # [1, L]
    visible = key <= pos  # [R, L]
    if window is not None:
        visible = visible & (key > pos - window)
    visible = visible.expand(batch, rows, keys)
    if key_mask is not None:
        visible = visible & key_mask[:, None, :]
    return visible[:, None]


def naive_scores(q: torch.Tensor, k: torch.Tensor, *, scale: float, softcap: float | None) -> torch.Tensor:
    """Scaled (and soft-capped) scores in float64: ``[B, Hq, R, L]``; K is repeated over each query group."""
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, dim=1)  # [B, Hq, L, D]
    s = scale * torch.einsum("bhrd,bhld->bhrl", q.double(), k64)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return s


def naive_probabilities(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    scale: float,
    softcap: float | None,
    window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores, visibility, LSE and probabilities of the response block, all float64.

    Returns:
        ``(s, visible, lse, p)``: ``s [B, Hq, R, L]`` scores (also where not visible),
        ``visible [B, 1, R, L] bool``, ``lse [B, Hq, R]`` (``-inf`` on a row that sees no key) and
        ``p [B, Hq, R, L]`` (0 where not visible, and on a row whose visible scores are all ``-inf``).
    """
    b, _, r, _ = q.shape
    seq = k.shape[2]
    s = naive_scores(q, k, scale=scale, softcap=softcap)
    visible = naive_visibility(b, r, seq, key_mask=key_mask, window=window, device=q.device)
    s_masked = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s_masked, dim=-1)  # [B, Hq, R]
    # Non-finite rule (SEMANTICS.md): a NaN or +inf score at a visible key makes the row NaN.
    poisoned = (torch.isnan(s_masked) | (s_masked == float("inf"))).any(-1)  # [B, Hq, R]
    lse = lse.masked_fill(poisoned, float("nan"))
    # a row with lse = -inf (no visible key, or only -inf scores) has no weight anywhere
    weighted = visible & (lse != float("-inf"))[..., None]  # [B, Hq, R, L]
    p = torch.where(weighted, torch.exp(s_masked - lse[..., None]), torch.zeros_like(s))
    return s, visible, lse, p


def naive_row_stats(
    p: torch.Tensor, s: torch.Tensor, lse: torch.Tensor, visible: torch.Tensor, prompt_len: torch.Tensor
) -> RowStats:
    """T1 statistics (float64) from materialised probabilities ``p [B, Hq, R, L]``."""
    seq = p.shape[-1]
    n = visible.sum(-1).to(p.dtype)  # [B, 1, R]
    log_p = torch.where(visible & (p != 0), s - lse[..., None], torch.zeros_like(s))  # 0 log 0 = 0
    entropy = -(p * log_p).sum(-1)
    log_n = torch.log(n.clamp(min=1.0))
    normalized = torch.where(n > 1, entropy / torch.where(n > 1, log_n, torch.ones_like(log_n)), 0.0)
    normalized = torch.where(torch.isnan(lse), float("nan"), normalized)
    is_prompt = torch.arange(seq, device=p.device)[None, :] < prompt_len[:, None]  # [B, L]
    prompt_mass = (p * is_prompt[:, None, None, :]).sum(-1)
    sum_sq = (p * p).sum(-1)
    weighted = lse != float("-inf")  # [B, Hq, R] (NaN rows included: they stay NaN)
    effective_support = torch.where(weighted, 1.0 / torch.where(weighted, sum_sq, 1.0), 0.0)
    return RowStats(
        entropy=entropy,
        normalized_entropy=normalized.expand_as(entropy),
        prompt_mass=prompt_mass,
        max_weight=p.amax(-1),
        effective_support=effective_support.expand_as(entropy).contiguous(),
    )


def naive_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, RowStats]:
    """fp64 forward of the response rows.

    Args:
        q: [B, Hq, R, D]. queries of the last R positions.
        k: [B, Hkv, L, D]. keys.
        v: [B, Hkv, L, D]. values.
        key_mask: [B, L] bool or None. True marks a real token.
        prompt_len: [B] int64. keys ``j < prompt_len[b]`` are prompt keys.
        scale: score scale.
        softcap: soft cap ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window, or None.

    Returns:
        ``(out [B, Hq, R, D] float64, lse [B, Hq, R] float64, RowStats of float64 tensors)``.
    """
    s, visible, lse, p = naive_probabilities(
        q, k, key_mask=key_mask, scale=scale, softcap=softcap, window=window
    )
    group = q.shape[1] // k.shape[1]
    out = torch.einsum("bhrl,bhld->bhrd", p, v.double().repeat_interleave(group, dim=1))
    return out, lse, naive_row_stats(p, s, lse, visible, prompt_len)
