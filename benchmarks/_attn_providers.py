"""Attention providers timed side by side: our tiers (Base, <=T1, <=T2, <=T3) and PyTorch SDPA."""

from __future__ import annotations

from collections.abc import Callable

import torch
from flashstats_kernels import StatsRequest, response_attention

TIERS = {
    "base": StatsRequest(rows=False),
    "t1": StatsRequest(rows=True),
    "t2": StatsRequest(rows=True, lookups=True, sink_positions=(0,)),
    "t3": StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,)),
}
"""Cumulative tiers: ``t2`` is T1 + T2, ``t3`` is T1 + T2 + T3 (the paper's <=T2, <=T3)."""


def make_inputs(length: int, rows: int, head_dim: int, q_heads: int = 32, kv_heads: int = 8, seed: int = 0):
    """Random bf16 ``q`` of all L positions ``[1, Hq, L, D]`` and ``k``, ``v`` ``[1, Hkv, L, D]``."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (1, q_heads, length, head_dim)
    q = torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16)
    k = torch.randn((1, kv_heads, length, head_dim), generator=g, device="cuda", dtype=torch.bfloat16)
    v = torch.randn((1, kv_heads, length, head_dim), generator=g, device="cuda", dtype=torch.bfloat16)
    return q, k, v


def ours(tier: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: int) -> Callable[[], object]:
    """Our response-stage call for one tier on the last ``rows`` query rows."""
    qr = q[:, :, -rows:]
    req = TIERS[tier]
    return lambda: response_attention(qr, k, v, request=req, backend="triton")


def _sdpa(backend, q, k, v, **kw) -> Callable[[], object]:
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    group = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # outside the timed call

    def run():
        with sdpa_kernel(backend):
            return sdpa(q, ke, ve, **kw)

    run()  # raises here when the backend refuses the shape
    return run


def sdpa_provider(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: int):
    """``fa2_full`` / ``cudnn_full`` (causal over all L rows) or ``fa2_block`` (bottom-right, R rows)."""
    from torch.nn.attention import SDPBackend
    from torch.nn.attention.bias import causal_lower_right

    if name == "fa2_full":
        return _sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, is_causal=True)
    if name == "cudnn_full":
        return _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, is_causal=True)
    if name == "fa2_block":
        mask = causal_lower_right(rows, q.shape[2])
        return _sdpa(SDPBackend.FLASH_ATTENTION, q[:, :, -rows:], k, v, attn_mask=mask)
    raise ValueError(f"unknown SDPA provider {name!r}; expected fa2_full, cudnn_full or fa2_block")
