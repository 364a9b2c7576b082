"""Plain (unscored) causal attention, and the visibility masks it uses.

PyTorch SDPA for plain layers; the flashstats Base kernel for soft-capped and sliding-window layers
(no score matrix, no dense mask).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flashstats_kernels import MAX_HEAD_DIM, StatsRequest, response_attention

_BASE = StatsRequest(rows=False)


def kernel_can_run(query: torch.Tensor, key: torch.Tensor, softcap, window, dropout: float) -> bool:
    """Whether a soft-capped or windowed layer runs on `base_attention` (no materialised scores).

    Layers without either run on SDPA, which is faster there. Training-mode calls (dropout, or inputs
    that need gradients: the Triton kernels have no backward) and head dims above 256 keep the dense path.
    """
    if softcap is None and window is None:
        return False
    if dropout > 0.0 or query.shape[-1] > MAX_HEAD_DIM:
        return False
    return not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad))


def base_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    keep: torch.Tensor | None,
    *,
    scale: float,
    softcap: float | None,
    window: int | None,
    backend: str = "auto",
) -> torch.Tensor:
    """Causal attention of the last ``Lq`` positions on the flashstats Base kernel (no statistics).

    Soft-cap and window are compile-time variants of the Triton kernel (key tiles outside every row's
    window are never loaded); on CPU the chunked PyTorch backend bounds memory linearly in ``L``. A row
    whose own token is padding sees no key and gets a zero output (never read by real tokens).

    Args:
        query: [B, Hq, Lq, D]. Queries of the last ``Lq`` positions.
        key: [B, Hkv, L, D]. Keys.
        value: [B, Hkv, L, D]. Values.
        keep: [B, L] bool or None. True on real keys.
        scale: score scale.
        softcap: soft-capping constant or None.
        window: sliding window or None.
        backend: kernel backend (``"auto"``: Triton on CUDA, PyTorch on CPU).

    Returns:
        ``[B, Hq, Lq, D]`` in the dtype of ``query``.
    """
    result = response_attention(
        query, key, value, request=_BASE, key_mask=keep, scale=scale, softcap=softcap, window=window,
        backend=backend,
    )  # fmt: skip
    return result.out


def visibility(
    q_pos: torch.Tensor, kv_length: int, keep: torch.Tensor | None, window: int | None
) -> torch.Tensor:
    """Causal (and sliding-window, padding) visibility of keys from query positions.

    A query row whose own key is padding still sees itself, so that padded rows stay finite
    (their outputs are never read by real tokens).

    Args:
        q_pos: [Lq] int64. Absolute positions of the query rows.
        kv_length: number of keys ``L``.
        keep: [B, L] bool or None. True on real keys.
        window: sliding window ``w`` (key ``j`` visible from ``i`` iff ``i - w < j <= i``) or None.

    Returns:
        ``[B or 1, 1, Lq, L]`` bool: True where the key is visible.
    """
    j = torch.arange(kv_length, device=q_pos.device)
    i = q_pos[:, None]
    vis = j[None, :] <= i  # [Lq, L]
    if window is not None:
        vis = vis & (j[None, :] > i - window)
    if keep is None:
        return vis[None, None]
    vis = vis[None] & (keep[:, None, :] | (j[None, :] == i)[None])  # [B, Lq, L]
    return vis[:, None]


def plain_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    scale: float,
    softcap: float | None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention of every query row, causal when ``mask`` is None.

    Args:
        query: [B, Hq, Lq, D]. Queries.
        key: [B, Hkv, L, D]. Keys.
        value: [B, Hkv, L, D]. Values.
        mask: [B or 1, 1, Lq, L] bool, or None for plain causal attention with ``Lq == L``.
        scale: score scale.
        softcap: soft-capping constant ``c`` (scores become ``c * tanh(s / c)``) or None.
        dropout: attention dropout probability (0 in eval).

    Returns:
        ``[B, Hq, Lq, D]`` in the dtype of ``query``.
    """
    groups = query.shape[1] // key.shape[1]
    if softcap is None and mask is None:
        return F.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scale, dropout_p=dropout, enable_gqa=groups > 1
        )
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if mask is None:
        mask = visibility(torch.arange(query.shape[2], device=query.device), key.shape[2], None, None)
    if softcap is None:
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scale, dropout_p=dropout
        )
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.dropout(torch.softmax(scores, dim=-1), p=dropout, training=dropout > 0)
    return torch.matmul(weights, value.float()).to(query.dtype)
