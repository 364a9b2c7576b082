"""Pure-PyTorch T3 column sums over query tiles, deterministic by construction.

Weights are recomputed from the scores and the stored LSE, one tile of response rows at a time, and
added to the ``[B, Hq, L]`` sums in a fixed order (no atomics), so repeated runs agree bitwise.
"""

from __future__ import annotations

import torch

from flashstats_kernels.ops._tiles import (
    accumulate_dtype,
    group_queries,
    tile_rows,
    tile_scores,
    tile_visibility,
)
from flashstats_kernels.types import ColumnStats


def columns_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    tile: int | None = None,
) -> ColumnStats:
    """T3 column sums and means in chunked PyTorch (the arguments of the Triton ``columns_triton``).

    A response row counts iff its position ``p_i >= prompt_len[b]``, the token at ``p_i`` is real and the
    row sees at least one key.

    Args:
        q: [B, Hq, R, D]. queries; any strides.
        k: [B, Hkv, L, D]. keys; any strides.
        lse: [B, Hq, R] float32. the LSE that the forward wrote.
        key_mask: [B, L] bool or None.
        prompt_len: [B] int64.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        tile: response rows per tile; None picks one that bounds memory.

    Returns:
        ColumnStats: ``sum`` and ``mean``, ``[B, Hq, L]`` float32.

    Shape:
        q: [B, Hq, R, D]; k: [B, Hkv, L, D]; lse: [B, Hq, R]; sum, mean: [B, Hq, L].
    """
    b, hq, r, _ = q.shape
    hkv, seq = k.shape[1], k.shape[2]
    acc = accumulate_dtype(q.dtype)
    qg = group_queries(q, hkv, acc)  # [B, Hkv, G, R, D]
    kt = k.to(acc).transpose(-1, -2).unsqueeze(2)  # [B, Hkv, 1, D, L]
    lse_g = lse.unflatten(1, (hkv, hq // hkv)).to(acc)  # [B, Hkv, G, R]
    # a row with lse = -inf has no weight (only -inf scores): +inf makes each exp(s - lse) 0, -inf s too
    lse_g = torch.where(lse_g == float("-inf"), float("inf"), lse_g)
    pos = torch.arange(seq - r, seq, device=q.device)
    real = pos[None, :] >= prompt_len[:, None]  # [B, R]
    if key_mask is not None:
        real = real & key_mask[:, seq - r :]
    total = torch.zeros(b, hkv, hq // hkv, seq, dtype=acc, device=q.device)
    seen_by = torch.zeros(b, seq, dtype=acc, device=q.device)
    step = tile_rows(b, hq, r, seq, tile)
    for r0 in range(0, r, step):
        r1 = min(r, r0 + step)
        vis = tile_visibility(
            r0, r1, r, seq, key_mask=key_mask, window=window, device=q.device
        )  # [B|1, C, L]
        counted = vis & (real[:, r0:r1] & vis.any(-1))[..., None]  # [B, C, L]
        s = tile_scores(qg[:, :, :, r0:r1], kt, scale=scale, softcap=softcap)  # [B, Hkv, G, C, L]
        s = torch.where(counted[:, None, None], s - lse_g[:, :, :, r0:r1, None], float("-inf"))
        total = total + torch.exp(s).sum(3)
        seen_by = seen_by + counted.sum(1).to(acc)
    total = total.flatten(1, 2)  # [B, Hq, L]
    mean = torch.where(seen_by[:, None] > 0, total / seen_by.clamp(min=1.0)[:, None], 0.0)
    return ColumnStats(sum=total.float(), mean=mean.float())
