"""T3 column sums and means in Triton: a key-major pass modelled on the FlashAttention-2 dV loop.

One program owns a tile of ``BLOCK_N`` keys of one (batch, query head) pair, keeps it resident, and
streams the response query tiles that can see it, re-scoring ``p_ij = exp(s_ij - lse_i)`` from Q, K
and the stored LSE. It writes its column sums once, without atomics, in a fixed order: the results
are bitwise identical across runs. Only *counted* rows contribute (``SEMANTICS.md``): the row's
position is at or after ``prompt_len[b]``, its own token is real, and it sees at least one key.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import Varlen
from flashstats_kernels.ops._fused import (
    TUNE_KEY,
    col_range,
    d_class,
    interpreting,
    launch_geometry,
    launch_sequences,
    load_tile,
    mma_cast,
    packed_sequence,
    pinned_config,
    size_class,
    tune_configs,
)
from flashstats_kernels.types import ColumnStats


@triton.jit(do_not_specialize=["R", "L", "window", "size_class"])
def _columns_kernel(
    Q, K, Lse, Sum, Mean, KeyMask, PromptLen, Seq,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, smb,
    Hq, R, L, scale, softcap, window, size_class,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr, VARLEN: tl.constexpr,
    SPLIT_EXP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)
    i_b = i_bh // Hq  # batch element (VARLEN: packed sequence)
    i_h = i_bh % Hq
    Lse_bh = Lse + i_bh * R  # the LSE of (i_b, i_h) in [B, Hq, R]
    o_col0 = i_bh * L  # first column of (i_b, i_h) in the [B, Hq, L] outputs
    q0, k0, i_t = 0, 0, i_b  # first row and key of the sequence, its batch index in the tensors
    if VARLEN:  # the tensors are [1, H, T, D], the LSE [1, Hq, TQ], the outputs [1, Hq, TK]
        Lse_bh = Lse + i_h * R
        o_col0 = i_h * L
        q0, R, k0, L = packed_sequence(Seq, i_b)
        Lse_bh += q0
        o_col0 += k0
        i_t = 0
        if i_n * BLOCK_N >= L:
            return
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    o_d = tl.arange(0, BLOCK_D)  # [BD]
    m_n = o_n < L
    m_d = o_d < D
    EVEN_D: tl.constexpr = D == BLOCK_D
    p_k = K + i_t * skb + (i_h // GROUP) * skh + (k0 + o_n[:, None]) * skn + o_d[None, :] * skd
    b_k = mma_cast(load_tile(p_k, m_n, m_d, True, not EVEN_D), MMA)  # [BN, BD]
    p_km = KeyMask + i_t * smb + k0
    keep_k = m_n
    if HAS_MASK:
        keep_k = keep_k & (tl.load(p_km + o_n, mask=m_n, other=0) != 0)
    p_q0 = Q + i_t * sqb + i_h * sqh + q0 * sqm
    plen = tl.load(PromptLen + i_b)
    c2 = scale * 1.4426950408889634

    # rows that can count and see a key of this tile: p_i >= max(prompt_len, first key), and, with a
    # window, p_i - window < last key
    lo = tl.maximum(tl.maximum(plen, i_n * BLOCK_N) - (L - R), 0) // BLOCK_M * BLOCK_M
    b_sum = tl.zeros([BLOCK_N], tl.float32)
    b_cnt = tl.zeros([BLOCK_N], tl.int32)
    if HAS_MASK or HAS_WINDOW:  # every tile tests visibility and counts
        hi = R
        if HAS_WINDOW:
            hi = tl.minimum(tl.maximum(i_n * BLOCK_N + BLOCK_N - 1 + window - (L - R), 0), R)
        b_sum, b_cnt = col_range(
            lo, hi, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap,
            window, b_sum, b_cnt, True, True, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA, WHILE, BLOCK_M,
            SPLIT_EXP,
        )  # fmt: skip
        b_cnt = b_cnt.to(tl.float32)
    else:  # row tiles at and after `mid` see the whole key tile and all count; full ones need no mask
        a = (b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap, window)
        first = tl.maximum(i_n * BLOCK_N + BLOCK_N - 1, plen) - (L - R)  # first row that sees every key
        mid = tl.minimum(tl.maximum((first + BLOCK_M - 1) // BLOCK_M * BLOCK_M, lo), R)
        full = tl.maximum(R // BLOCK_M * BLOCK_M, mid)
        b_sum, b_cnt = col_range(
            lo, mid, *a, b_sum, b_cnt,
            True, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA, WHILE, BLOCK_M,
            SPLIT_EXP,
        )  # fmt: skip
        b_sum, b_cnt = col_range(
            mid, full, *a, b_sum, b_cnt,
            False, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA, WHILE, BLOCK_M,
            SPLIT_EXP,
        )  # fmt: skip
        b_sum, b_cnt = col_range(
            full, R, *a, b_sum, b_cnt,
            True, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA, WHILE, BLOCK_M,
            SPLIT_EXP,
        )  # fmt: skip
        # rows i that count and see key j: L - max(j, prompt_len, L - R) of them (every row sees a key)
        b_cnt = tl.maximum(L - tl.maximum(tl.maximum(o_n, plen), L - R), 0)
        b_cnt = tl.where(m_n, b_cnt, 0).to(tl.float32)
    o_col = o_col0 + o_n  # [BN] offsets into [B, Hq, L]
    tl.store(Sum + o_col, b_sum, mask=m_n)
    b_mean = b_sum / tl.maximum(b_cnt, 1.0)
    tl.store(Mean + o_col, tl.where(b_cnt > 0, b_mean, 0.0), mask=m_n)


_COLUMN_TABLES = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages) per head-dim class
    64: ((64, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (64, 128, 4, 3)),
    128: ((64, 128, 8, 2), (64, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)),
    256: ((32, 64, 4, 2), (64, 64, 8, 2), (32, 128, 8, 2), (64, 128, 8, 2)),
}


@functools.cache
def _tuned_columns(dc: int):
    """The key-major kernel autotuned over the candidates of one head-dim class (built on first use)."""
    configs = tune_configs(_COLUMN_TABLES[dc], ("BLOCK_M", "BLOCK_N"))
    return triton.autotune(configs, key=[*TUNE_KEY, "SPLIT_EXP"])(_columns_kernel)


def split_exp() -> int:
    """``k`` of ``FLASHSTATS_T3_SPLIT_EXP=k`` (2, 4 or 8): 1 / k of T3's exponentials on the FMA pipes.

    0 when unset or 0 (every exponential on the special-function unit). Read at call time: a benchmark
    switch while the variant is measured.
    """
    raw = os.environ.get("FLASHSTATS_T3_SPLIT_EXP", "0") or "0"
    if raw not in ("0", "2", "4", "8"):
        raise ValueError(
            f"FLASHSTATS_T3_SPLIT_EXP must be 0, 2, 4 or 8 (1 / k of the exponentials on FMAs), got {raw!r}"
        )
    return int(raw)


def columns_config(dtype: torch.dtype, block_d: int) -> dict[str, int] | None:
    """Fixed tile sizes of the key-major kernel, or None when it is autotuned (CUDA, 16-bit inputs)."""
    if interpreting():
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32 or (dtype == torch.float8_e5m2 and block_d > 128):
        return {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    if dtype == torch.float8_e5m2:
        return {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2}
    return pinned_config(_COLUMN_TABLES[d_class(block_d)])


def columns_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    *,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    varlen: Varlen | None = None,
) -> ColumnStats:
    """T3 column sums and means over the counted response rows, re-scored from Q, K and a stored LSE.

    Args:
        q: [B, Hq, R, D] bf16/fp16/fp8-e5m2/fp32. Queries of the last ``R`` positions; any strides.
        k: [B, Hkv, L, D] same dtype. Keys; any strides.
        lse: [B, Hq, R] float32. Natural-log LSE written by a forward (``-inf`` on rows without keys).
        key_mask: [B, L] bool or None. True marks a real token.
        prompt_len: [B] int64 on the device of ``q``. Rows at ``p_i < prompt_len[b]`` do not count.
        scale: score scale.
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window, or None.
        varlen: packed sequences (``B = 1``, ``prompt_len`` per sequence), or None. Keys that no
            sequence covers get 0.

    Returns:
        [`ColumnStats`][flashstats_kernels.ColumnStats]: sum and mean, [B, Hq, L] float32 each; bitwise
        deterministic.

    Shape:
        q: [B, Hq, R, D]; k: [B, Hkv, L, D]; lse: [B, Hq, R]; sum, mean: [B, Hq, L].
    """
    g = launch_geometry(q, k, key_mask, softcap, window)
    # A row with lse = -inf has no weight (it sees no key, or only -inf scores): +inf in its place makes
    # every exp(s - lse) 0, and the rows that count stay those of SEMANTICS.md (the count needs no lse).
    lse = torch.where(lse == float("-inf"), float("inf"), lse)
    new = torch.zeros if varlen is not None and not varlen.full_keys else torch.empty
    col_sum = new(g.B, g.Hq, g.L, dtype=torch.float32, device=q.device)
    col_mean = new(g.B, g.Hq, g.L, dtype=torch.float32, device=q.device)
    seq, n_seq, extent = launch_sequences(g, varlen, key_major=True)
    if col_sum.numel() > 0 and n_seq > 0:
        cfg = columns_config(q.dtype, g.block_d)
        kernel = _columns_kernel if cfg is not None else _tuned_columns(d_class(g.block_d))
        grid = lambda meta: (triton.cdiv(extent, meta["BLOCK_N"]), n_seq * g.Hq)  # noqa: E731
        kernel[grid](
            q, k, lse.contiguous(), col_sum, col_mean, g.key_mask, prompt_len.contiguous(), seq,
            *q.stride(), *k.stride(), g.mask_stride,
            g.Hq, g.R, g.L, float(scale), g.softcap, g.window, size_class(g.B * g.Hq * g.L),
            D=g.D, GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
            MMA=g.mma, WHILE=interpreting(), VARLEN=varlen is not None, SPLIT_EXP=split_exp(),
            BLOCK_D=g.block_d, **(cfg or {}),
        )  # fmt: skip
    return ColumnStats(sum=col_sum, mean=col_mean)


__all__ = ["columns_triton"]
