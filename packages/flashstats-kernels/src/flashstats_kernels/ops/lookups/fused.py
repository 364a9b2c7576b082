"""T2 lookups in Triton: a few weights per row, re-scored from Q, K and the stored LSE.

One program owns ``BLOCK_M`` response rows of one (batch, query head) pair. Each looked-up weight is
``p_ij = exp(s_ij - lse_i)`` with ``s_ij`` re-evaluated as a row-wise dot product in fp32, so the
kernel works after any forward that wrote the LSE, and the key positions (the diagonal, the previous
token and the sink positions) are runtime values: new sinks need no recompilation.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import Varlen
from flashstats_kernels.ops._fused import (
    interpreting,
    launch_geometry,
    launch_sequences,
    lookup,
    packed_sequence,
    row_buffers,
)
from flashstats_kernels.types import LookupStats


@triton.jit
def _lookups_kernel(
    Q, K, Lse, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, Seq,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, smb, spb,
    Hq, R, L, D, S, scale, softcap, window, log_eps,
    GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    WHILE: tl.constexpr, VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)
    i_b = i_bh // Hq  # batch element (VARLEN: packed sequence)
    i_h = i_bh % Hq
    o_row0 = i_bh * R  # first row of (i_b, i_h) in the [B, Hq, R] outputs
    q0, k0, i_t = 0, 0, i_b  # first row and key of the sequence, its batch index in the tensors
    if VARLEN:  # the tensors are [1, H, T, D] and the outputs [1, Hq, TQ] (R = TQ, L = TK)
        o_row0 = i_h * R
        q0, R, k0, L = packed_sequence(Seq, i_b)
        o_row0 += q0
        i_t = 0
        if i_m * BLOCK_M >= R:
            return
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    o_d = tl.arange(0, BLOCK_D)  # [BD]
    m_m = o_m < R
    m_d = o_d < D
    pos_q = L - R + o_m  # [BM] positions of the rows in their sequence
    p_q = Q + i_t * sqb + i_h * sqh + (q0 + o_m[:, None]) * sqm + o_d[None, :] * sqd
    b_q = tl.load(p_q, mask=m_m[:, None] & m_d[None, :], other=0.0).to(tl.float32)  # [BM, BD]
    p_k0 = K + i_t * skb + (i_h // GROUP) * skh + k0 * skn
    p_km = KeyMask + i_t * smb + k0
    o_row = o_row0 + o_m  # [BM] offsets into [B, Hq, R]
    b_lse2 = tl.load(Lse + o_row, mask=m_m, other=float("-inf")) * 1.4426950408889634  # [BM]
    plen = tl.load(PromptLen + i_b)

    b_d = lookup(
        b_q, p_k0, p_km, pos_q, pos_q, m_m, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window,
        HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
    )  # fmt: skip
    tl.store(Diag + o_row, tl.maximum(b_d * 0.6931471805599453, log_eps), mask=m_m)
    b_pv = lookup(
        b_q, p_k0, p_km, pos_q - 1, pos_q, m_m & (pos_q > plen), b_lse2, L, skn, skd, o_d, m_d, scale,
        softcap, window, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
    )  # fmt: skip
    tl.store(Prev + o_row, tl.exp2(b_pv), mask=m_m)

    i_s = 0
    if WHILE:  # the interpreter cannot take runtime loop bounds in range()
        while i_s < S:
            _sink(
                b_q, p_k0, p_km, pos_q, m_m, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window,
                SinkPos + i_b * spb + i_s, Sinks + o_row * S + i_s, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
            )  # fmt: skip
            i_s += 1
    else:
        for i_s in range(0, S):
            _sink(
                b_q, p_k0, p_km, pos_q, m_m, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window,
                SinkPos + i_b * spb + i_s, Sinks + o_row * S + i_s, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
            )  # fmt: skip


@triton.jit
def _sink(
    b_q, p_k0, p_km, pos_q, m_m, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window, p_pos, p_out,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
):  # fmt: skip
    """Weight of one sink position (shared by the rows of the tile) on every row."""
    pos_k = tl.zeros_like(pos_q) + tl.load(p_pos)  # [BM]
    b_w = lookup(
        b_q, p_k0, p_km, pos_k, pos_q, m_m, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window,
        HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
    )  # fmt: skip
    tl.store(p_out, tl.exp2(b_w), mask=m_m)


def lookups_triton(
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
    varlen: Varlen | None = None,
) -> LookupStats:
    """T2 lookups of the response rows from Q, K and a stored LSE.

    Args:
        q: [B, Hq, R, D] bf16/fp16/fp8-e5m2/fp32. Queries of the last ``R`` positions; any strides.
        k: [B, Hkv, L, D] same dtype. Keys; any strides.
        lse: [B, Hq, R] float32. Natural-log LSE written by a forward (``-inf`` on rows without keys).
        key_mask: [B, L] bool or None. True marks a real key.
        prompt_len: [B] int64 on the device of ``q``. ``prev_weight`` is 0 on rows at ``p_i <= prompt_len``.
        scale: score scale.
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window, or None.
        sink_positions: [B, S] int64 on the device of ``q``. Key positions to read (0 outside ``[0, L)``).
        diag_eps: ``diag_log`` is clamped below at ``log(diag_eps)``.
        varlen: packed sequences (``B = 1``; ``prompt_len`` and ``sink_positions`` per sequence, positions
            counted from each sequence's first key), or None.

    Returns:
        [`LookupStats`][flashstats_kernels.LookupStats]: diag_log and prev_weight [B, Hq, R] float32,
        sink_weights [B, Hq, R, S] float32.

    Shape:
        q: [B, Hq, R, D]; k: [B, Hkv, L, D]; lse: [B, Hq, R]; sink_positions: [B, S].
    """
    g = launch_geometry(q, k, key_mask, softcap, window)
    seq, n_seq, extent = launch_sequences(g, varlen)
    if sink_positions.dim() != 2 or sink_positions.shape[0] != n_seq:
        raise ValueError(f"expected sink_positions [B={n_seq}, S], got {tuple(sink_positions.shape)}")
    S = sink_positions.shape[1]
    diag, gaps = row_buffers(q, g, varlen)
    prev, _ = row_buffers(q, g, varlen)
    sinks, _ = row_buffers(q, g, varlen, trailing=(S,))
    if gaps:
        diag.fill_(math.log(diag_eps))
    if diag.numel() > 0 and n_seq > 0:
        block_m = 16 if g.block_d > 128 else 32
        grid = (triton.cdiv(extent, block_m), n_seq * g.Hq)
        pos = sink_positions.to(device=q.device, dtype=torch.int64).contiguous()
        _lookups_kernel[grid](
            q, k, lse.contiguous(), diag, prev, sinks, pos, g.key_mask, prompt_len.contiguous(), seq,
            *q.stride(), *k.stride(), g.mask_stride, pos.stride(0),
            g.Hq, g.R, g.L, g.D, S, float(scale), g.softcap, g.window, math.log(diag_eps),
            GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
            WHILE=interpreting(), VARLEN=varlen is not None, BLOCK_M=block_m, BLOCK_D=g.block_d, num_warps=4,
        )  # fmt: skip
    return LookupStats(diag_log=diag, prev_weight=prev, sink_weights=sinks)


__all__ = ["lookups_triton"]
