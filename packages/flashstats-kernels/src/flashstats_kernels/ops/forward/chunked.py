"""Pure-PyTorch response-stage forward over query tiles: output, LSE and T1 row statistics.

Each tile of ``C`` response rows sees the keys from the first row's window start to the last row at once,
so memory is ``O(B * Hq * C * L)`` with ``C`` chosen to bound it (linear in ``L``), never the whole
``R x L`` block, and a sliding window ``w`` makes the work ``O(R * (C + w))``. Grouped-query attention
reshapes the queries to ``[B, Hkv, G, R, D]`` and broadcasts K and V (no repeat). Accumulation is in
float32 (float64 for float64 inputs). This is the CPU path and the fallback of the Triton kernels.
"""

from __future__ import annotations

import torch

from flashstats_kernels.ops._tiles import (
    accumulate_dtype,
    group_queries,
    key_span,
    tile_rows,
    tile_scores,
    tile_visibility,
)
from flashstats_kernels.types import RowStats


def _tile_forward(
    s: torch.Tensor, vis: torch.Tensor, vt: torch.Tensor, is_prompt: torch.Tensor, rows: bool
) -> tuple[torch.Tensor, ...]:
    """Output, LSE and (if ``rows``) the five T1 statistics of one tile.

    Args:
        s: [B, Hkv, G, C, L]. scores.
        vis: [B, 1, 1, C, L] bool. visibility.
        vt: [B, Hkv, 1, L, D]. values.
        is_prompt: [B, 1, 1, 1, L] bool. prompt keys.
        rows: whether to compute T1.
    """
    s = s.masked_fill(~vis, float("-inf"))
    # Non-finite rule (SEMANTICS.md): a NaN or +inf score at a visible key makes the row NaN.
    poison = torch.where((torch.isnan(s) | (s == float("inf"))).any(-1), float("nan"), 0.0)  # [B, Hkv, G, C]
    m = s.amax(-1, keepdim=True)  # [B, Hkv, G, C, 1]
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)  # 0 where not visible
    norm = e.sum(-1)  # [B, Hkv, G, C]
    seen = norm > 0
    inv_l = torch.where(seen, 1.0 / torch.where(seen, norm, 1.0), 0.0)
    lse = torch.where(seen, m[..., 0] + torch.log(torch.where(seen, norm, 1.0)), float("-inf")) + poison
    p = e * inv_l[..., None]
    out = torch.matmul(p, vt) + poison[..., None]  # [B, Hkv, G, C, D]
    if not rows:
        return out, lse
    # H = log norm + sum_j p_j (m - s_j): both terms are >= 0, so nothing cancels (0 log 0 = 0).
    gap = torch.where(vis & (e > 0), m - s, torch.zeros_like(s))
    entropy = torch.where(seen, torch.log(torch.where(seen, norm, 1.0)) + (p * gap).sum(-1), 0.0)
    n = vis.sum(-1).to(s.dtype)  # [B, 1, 1, C]
    many = n > 1
    normalized = torch.where(many, entropy / torch.log(torch.where(many, n, 2.0)), 0.0)
    prompt_mass = (p * is_prompt).sum(-1)
    sum_sq = (e * e).sum(-1)
    effective = torch.where(seen, norm * norm / torch.where(seen, sum_sq, 1.0), 0.0)
    stats = (entropy, normalized, prompt_mass, inv_l, effective)
    return out, lse, *(t + poison for t in stats)


def forward_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    rows: bool,
    tile: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, RowStats | None]:
    """Response-stage forward in chunked PyTorch (the arguments of the Triton ``forward_triton``).

    Args:
        q: [B, Hq, R, D]. queries of the last R positions; any strides.
        k: [B, Hkv, L, D]. keys; any strides.
        v: [B, Hkv, L, D]. values; any strides.
        key_mask: [B, L] bool or None. True marks a real key.
        prompt_len: [B] int64 on q's device. keys ``j < prompt_len[b]`` are prompt keys.
        scale: score scale.
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window or None.
        rows: whether to compute the T1 row statistics.
        tile: response rows per tile; None picks one that bounds memory.

    Returns:
        ``(out [B, Hq, R, D] in q's dtype, lse [B, Hq, R] float32, RowStats of [B, Hq, R] float32 or None)``.

    Shape:
        q: [B, Hq, R, D]; k, v: [B, Hkv, L, D]; out: [B, Hq, R, D]; lse and statistics: [B, Hq, R].
    """
    b, hq, r, d = q.shape
    hkv, seq = k.shape[1], k.shape[2]
    acc = accumulate_dtype(q.dtype)
    qg = group_queries(q, hkv, acc)  # [B, Hkv, G, R, D]
    kt = k.to(acc).transpose(-1, -2).unsqueeze(2)  # [B, Hkv, 1, D, L]
    vt = v.to(acc).unsqueeze(2)  # [B, Hkv, 1, L, D]
    is_prompt = (torch.arange(seq, device=q.device) < prompt_len[:, None]).view(b, 1, 1, 1, seq)
    n_out = 7 if rows else 2
    results: list[list[torch.Tensor]] = [[] for _ in range(n_out)]
    step = tile_rows(b, hq, r, seq, tile)
    for r0 in range(0, r, step):
        r1 = min(r, r0 + step)
        k0, k1 = key_span(r0, r1, r, seq, window)  # keys after the tile's last row or before its first
        s = tile_scores(qg[:, :, :, r0:r1], kt[..., k0:k1], scale=scale, softcap=softcap)
        vis = tile_visibility(r0, r1, r, seq, key_mask=key_mask, window=window, device=q.device)[..., k0:k1]
        parts = _tile_forward(s, vis[:, None, None], vt[..., k0:k1, :], is_prompt[..., k0:k1], rows)
        for acc_list, t in zip(results, parts, strict=True):
            acc_list.append(t)
    merged = [torch.cat(parts, dim=3).flatten(1, 2) for parts in results]  # [B, Hq, R, ...]
    out = merged[0].to(q.dtype)
    lse = merged[1].float()
    if not rows:
        return out, lse, None
    ent, norm, pmass, maxw, eff = (t.float() for t in merged[2:])
    return (
        out,
        lse,
        RowStats(
            entropy=ent, normalized_entropy=norm, prompt_mass=pmass, max_weight=maxw, effective_support=eff
        ),
    )
