"""Triton building blocks shared by the fused ops (forward, lookups, columns, decode).

Device functions: score scaling in log2 units (`scores_log2`), dot-operand casts and masked tile
loads, the forward's key-tile step with its T1 accumulators (`fwd_tile`, `fwd_range`, and `fwd_inner`
for tiles that every row sees whole), the key-major column step of T3 (`col_tile`, `col_step`,
`col_range`) and the single-weight T2 lookup (`lookup`).
Host functions: the launch geometry that every launcher derives, and the tuning-table helpers.

Every op's kernels and launchers import from here; no op imports another op's private names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import Varlen
from flashstats_kernels.ops._exp import exp2_row_sums

_MMA_NATIVE, _MMA_FP16, _MMA_FP32 = 0, 1, 2
_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e5m2)
# How T1's entropy term ignores zero weights (read once, at import; a benchmark switch): ``p * max(u, -200)``
# on masked tiles only (default: one instruction per score there, none on interior tiles), on every tile
# (``FLASHSTATS_T1_GUARD=always``) or ``p * where(p > 0, u, 0)`` on every tile (``=select``, two).
_T1_GUARD = os.environ.get("FLASHSTATS_T1_GUARD", "masked")
if _T1_GUARD not in ("masked", "always", "select"):
    raise ValueError(f"FLASHSTATS_T1_GUARD must be masked, always or select, got {_T1_GUARD!r}")
_T1_SELECT = tl.constexpr(_T1_GUARD == "select")
T1_GUARD_ALWAYS = tl.constexpr(_T1_GUARD == "always")


@triton.jit
def scores_log2(raw, scale, softcap, HAS_SOFTCAP: tl.constexpr):
    """Scaled (and soft-capped) scores in log2 units from raw dot products ``<q, k>``."""
    if HAS_SOFTCAP:
        t = raw * (scale / softcap)
        a = tl.abs(t)
        e = tl.exp2(a * (-2.0 * 1.4426950408889634))  # e^{-2|t|}, never overflows
        th = (1.0 - e) / (1.0 + e)
        # below |t| = 1/4, 1 - e cancels: the odd Taylor series to t^9 is exact to ~1e-8 relative there
        t2 = t * t
        poly = t * (1.0 + t2 * (-1.0 / 3.0 + t2 * (2.0 / 15.0 + t2 * (-17.0 / 315.0 + t2 * (62.0 / 2835.0)))))
        th = tl.where(a < 0.25, poly, tl.where(t < 0, -th, th))
        return th * (softcap * 1.4426950408889634)
    else:
        return raw * (scale * 1.4426950408889634)


@triton.jit
def mma_cast(x, MMA: tl.constexpr):
    """Operand dtype of ``tl.dot``: native, fp16 (exact for fp8-e5m2 inputs) or fp32 (interpreter, fp32)."""
    if MMA == 1:
        x = x.to(tl.float16)
    if MMA == 2:
        x = x.to(tl.float32)
    return x


@triton.jit
def load_tile(ptr, m_a, m_b, MASK_A: tl.constexpr, MASK_B: tl.constexpr):
    """Load a 2-D tile, masking rows (``m_a``) and/or columns (``m_b``) only where a flag asks for it."""
    if MASK_A and MASK_B:
        x = tl.load(ptr, mask=m_a[:, None] & m_b[None, :], other=0.0)
    elif MASK_A:
        x = tl.load(ptr, mask=m_a[:, None], other=0.0)
    elif MASK_B:
        x = tl.load(ptr, mask=m_b[None, :], other=0.0)
    else:
        x = tl.load(ptr)
    return x


@triton.jit
def packed_sequence(Seq, i_b):
    """``(q0, R_b, k0, L_b)`` of packed sequence ``i_b``: rows ``[q0, q0 + R_b)``, keys ``[k0, k0 + L_b)``.

    ``Seq`` is the ``[N, 4] int64`` table of a packed (varlen) launch; its tensors hold every sequence
    on the token axis of batch 0.
    """
    p_s = Seq + i_b * 4
    return tl.load(p_s), tl.load(p_s + 1).to(tl.int32), tl.load(p_s + 2), tl.load(p_s + 3).to(tl.int32)


@triton.jit
def _qk(b_q, p_k0, o_n, m_n, o_d, m_d, skn, skd, EVEN_D: tl.constexpr, MASKED: tl.constexpr,
        MMA: tl.constexpr, SPLIT: tl.constexpr):  # fmt: skip
    """Raw scores ``<q, k>`` of a key tile: one ``tl.dot``, or a head part plus a tail part (``SPLIT``).

    With ``SPLIT`` the head dim is cut into a power-of-two head (``b_q[0]``, never masked) and a narrow
    tail (``b_q[1]``, masked unless ``EVEN_D``): two accumulating ``tl.dot`` calls instead of one over
    zero padding (d = 80 runs 64 + 16 columns, not 128).
    """
    if SPLIT:
        p_kh = p_k0 + o_d[0][:, None] * skd + o_n[None, :] * skn
        b_s = tl.dot(
            b_q[0], mma_cast(load_tile(p_kh, m_d[0], m_n, False, MASKED), MMA), input_precision="ieee"
        )
        p_kt = p_k0 + o_d[1][:, None] * skd + o_n[None, :] * skn
        b_kt = mma_cast(load_tile(p_kt, m_d[1], m_n, not EVEN_D, MASKED), MMA)
        b_s = tl.dot(b_q[1], b_kt, b_s, input_precision="ieee")
    else:
        b_kt = mma_cast(
            load_tile(p_k0 + o_d[:, None] * skd + o_n[None, :] * skn, m_d, m_n, not EVEN_D, MASKED), MMA
        )
        b_s = tl.dot(b_q, b_kt, input_precision="ieee")  # [BM, BN]
    return b_s


@triton.jit
def _pv(b_p, b_acc, alpha, p_v0, o_n, m_n, o_d, m_d, svn, svd, EVEN_D: tl.constexpr, MASKED: tl.constexpr,
        MMA: tl.constexpr, SPLIT: tl.constexpr):  # fmt: skip
    """``acc <- alpha acc + P V`` for one key tile (a head and a tail accumulator with ``SPLIT``)."""
    if SPLIT:
        p_vh = p_v0 + o_n[:, None] * svn + o_d[0][None, :] * svd
        b_v = mma_cast(load_tile(p_vh, m_n, m_d[0], MASKED, False), MMA)
        b_pc = b_p.to(b_v.dtype)
        b_acc_h = tl.dot(b_pc, b_v, b_acc[0] * alpha[:, None], input_precision="ieee")  # [BM, BDH]
        p_vt = p_v0 + o_n[:, None] * svn + o_d[1][None, :] * svd
        b_vt = mma_cast(load_tile(p_vt, m_n, m_d[1], MASKED, not EVEN_D), MMA)
        b_acc_t = tl.dot(b_pc, b_vt, b_acc[1] * alpha[:, None], input_precision="ieee")  # [BM, BDT]
        b_acc = (b_acc_h, b_acc_t)
    else:
        b_v = mma_cast(
            load_tile(p_v0 + o_n[:, None] * svn + o_d[None, :] * svd, m_n, m_d, MASKED, not EVEN_D), MMA
        )
        b_acc = tl.dot(b_p.to(b_v.dtype), b_v, b_acc * alpha[:, None], input_precision="ieee")
    return b_acc


@triton.jit
def fwd_tile(
    start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    MASKED: tl.constexpr, PM: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr,
    MMA: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr = False, SCORES: tl.constexpr = False,
    p_sc=None, m_sc=None, LAZY: tl.constexpr = False, GUARD: tl.constexpr = True,
):  # fmt: skip
    """One key/value tile: online softmax and T1 accumulators (``MASKED`` off on interior tiles).

    ``PM`` says how the tile adds to the prompt mass: 0 no key is a prompt key, 1 every key is, 2 test
    each key. ``COUNT`` counts visible keys (only needed with a key mask; otherwise ``n`` is known).
    With ``SPLIT``, ``b_q``, ``o_d``, ``m_d`` and ``b_acc`` are (head, tail) pairs (see `_qk`).
    With ``SCORES``, the tile's scores in log2 units (``-inf`` where not visible) are also stored at
    ``p_sc[:, None] + key`` for the rows where ``m_sc`` holds (``[BM]`` row pointers and mask): the
    decoding op adds their weights to the running column sums once the merged LSE is known.
    With ``LAZY``, the entropy and squared-weight sums are kept per score: ``b_a`` is a pair (a ``[BM]``
    row term, a ``[BM, BN]`` tile) and ``b_q2`` a ``[BM, BN]`` tile, both rescaled with the running max
    and summed over keys once by the caller (`lazy_rows`), which saves two row reductions per tile
    (across warps when a tile of few rows is spread over the warps along its keys, as in decoding).
    ``GUARD`` off skips T1's zero-weight clamp on an unmasked tile (see the comment at the clamp).
    """
    o_n = start_n + tl.arange(0, BLOCK_N)  # [BN]
    m_n = o_n < L
    b_s = _qk(b_q, p_k0, o_n, m_n, o_d, m_d, skn, skd, EVEN_D, MASKED, MMA, SPLIT)  # [BM, BN] raw <q, k>
    if HAS_SOFTCAP:
        b_s = scores_log2(b_s, scale, softcap, HAS_SOFTCAP)  # log2 units
    if MASKED:
        vis = (o_n[None, :] <= pos_q[:, None]) & m_n[None, :]  # [BM, BN]
        if HAS_WINDOW:
            vis = vis & (o_n[None, :] > pos_q[:, None] - window)
        if HAS_MASK:
            vis = vis & (tl.load(p_km + o_n, mask=m_n, other=0) != 0)[None, :]
        b_s = tl.where(vis, b_s, float("-inf"))
    if SCORES:
        b_sc = b_s if HAS_SOFTCAP else b_s * c2
        tl.store(p_sc[:, None] + o_n[None, :], b_sc, mask=m_sc[:, None] & m_n[None, :])
    if HAS_SOFTCAP:
        b_mx_new = tl.maximum(b_mx, tl.max(b_s, 1))  # [BM]
        b_u = b_s - b_mx_new[:, None]
    else:  # the scale (with log2 e) folded into one FMA per score
        b_mx_new = tl.maximum(b_mx, tl.max(b_s, 1) * c2)
        b_u = b_s * c2 - b_mx_new[:, None]
    alpha = tl.exp2(b_mx - b_mx_new)  # [BM]
    b_p = tl.exp2(b_u)  # [BM, BN], 0 where not visible
    b_ps = tl.sum(b_p, 1)
    if ROWS:
        # invisible keys and -inf scores (p = 0, u = -inf): 0 log 0 = 0. Where p > 0, u >= -150 (exp2
        # underflows to 0 below it), so clamping u at -200 changes no term and costs one max per score.
        # Without ``GUARD`` the clamp runs on masked tiles only: an interior tile's u are finite unless
        # an input is infinite (p u = 0 where p underflows), and a -inf score there makes the entropy
        # sum NaN with a finite l, which the forward detects and recomputes with ``GUARD``.
        if _T1_SELECT:
            b_u = tl.where(b_p > 0.0, b_u, 0.0)
        elif MASKED or GUARD:
            b_u = tl.maximum(b_u, -200.0)
        if LAZY:  # sum(A) + row term = the running entropy sum; sum(Q) = the squared-weight sum
            b_a = (alpha * (b_a[0] + b_l * (b_mx - b_mx_new)), alpha[:, None] * b_a[1] + b_p * b_u)
            b_q2 = (alpha * alpha)[:, None] * b_q2 + b_p * b_p
        else:
            b_a = alpha * (b_a + b_l * (b_mx - b_mx_new)) + tl.sum(b_p * b_u, 1)
            b_q2 = alpha * alpha * b_q2 + tl.sum(b_p * b_p, 1)
        if PM == 0:
            b_pm = alpha * b_pm
        elif PM == 1:
            b_pm = alpha * b_pm + b_ps
        else:
            b_pm = alpha * b_pm + tl.sum(tl.where(o_n[None, :] < plen, b_p, 0.0), 1)
        if COUNT:
            b_n += tl.sum(vis.to(tl.int32), 1)
    b_l = alpha * b_l + b_ps
    b_acc = _pv(b_p, b_acc, alpha, p_v0, o_n, m_n, o_d, m_d, svn, svd, EVEN_D, MASKED, MMA, SPLIT)
    return b_mx_new, b_l, b_acc, b_a, b_q2, b_pm, b_n


@triton.jit
def fwd_range(
    lo, hi, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    MASKED: tl.constexpr, PM: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr,
    MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr = False,
    SCORES: tl.constexpr = False, p_sc=None, m_sc=None, LAZY: tl.constexpr = False,
    GUARD: tl.constexpr = True,
):  # fmt: skip
    """Run `fwd_tile` over the key tiles ``lo, lo + BLOCK_N, ... < hi`` (flags: `fwd_tile`)."""
    if WHILE:  # the interpreter cannot take runtime loop bounds in range()
        start_n = lo
        while start_n < hi:
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = fwd_tile(
                start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale,
                softcap, window, b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n, MASKED, PM, COUNT, EVEN_D,
                HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
            )  # fmt: skip
            start_n += BLOCK_N
    else:
        for start_n in range(lo, hi, BLOCK_N):
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = fwd_tile(
                start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale,
                softcap, window, b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n, MASKED, PM, COUNT, EVEN_D,
                HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
            )  # fmt: skip
    return b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n


@triton.jit
def lazy_zeros(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Empty ``LAZY`` entropy and squared-weight accumulators of `fwd_tile`: ``((a row, A tile), Q tile)``."""
    zm = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    return (tl.zeros([BLOCK_M], tl.float32), zm), zm


@triton.jit
def lazy_rows(b_a, b_q2):
    """The ``[BM]`` entropy and squared-weight sums of `fwd_tile`'s ``LAZY`` accumulators."""
    return b_a[0] + tl.sum(b_a[1], 1), tl.sum(b_q2, 1)


@triton.jit
def fwd_inner(
    lo, hi, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    SCORES: tl.constexpr = False, p_sc=None, m_sc=None, LAZY: tl.constexpr = False,
    GUARD: tl.constexpr = True,
):  # fmt: skip
    """Unmasked key tiles ``lo <= j < hi``: every key visible to every row (no key mask, inside every window).

    With the row statistics on, the range is split at the prompt boundary so that only one tile tests
    ``j < prompt_len``; visible keys are not counted (the caller knows ``n``). ``SCORES``: see `fwd_tile`.
    """
    # compile-time flags are passed one by one: a tuple of them is no constexpr when compiled
    a = (b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window)
    st = (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n)
    if ROWS:
        pa = tl.minimum(tl.maximum(plen // BLOCK_N * BLOCK_N, lo), hi)  # keys below pa are prompt keys
        pb = tl.minimum(pa + BLOCK_N, hi)  # keys from pb on are not
        st = fwd_range(
            lo, pa, *a, *st, False, 1, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
        )  # fmt: skip
        st = fwd_range(
            pa, pb, *a, *st, False, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
        )  # fmt: skip
        st = fwd_range(
            pb, hi, *a, *st, False, 0, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
        )  # fmt: skip
    else:
        st = fwd_range(
            lo, hi, *a, *st, False, 0, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT, SCORES, p_sc, m_sc, LAZY, GUARD,
        )  # fmt: skip
    return st


@triton.jit
def col_tile(
    start_m, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap, window,
    b_sum, b_cnt,
    MASKED: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, MMA: tl.constexpr, BLOCK_M: tl.constexpr,
    FMA_PARTS: tl.constexpr,
):  # fmt: skip
    """Add the weights of one response query tile to the column accumulators of the key tile.

    Interior tiles (``MASKED`` off) hold only counted rows that see every key of the key tile.
    ``FMA_PARTS``: `exp2_row_sums` (a share of the exponentials on the FMA pipes).
    """
    o_m = start_m + tl.arange(0, BLOCK_M)  # [BM]
    m_m = o_m < R
    pos_q = L - R + o_m  # [BM]
    p_q = p_q0 + o_m[:, None] * sqm + o_d[None, :] * sqd
    b_q = mma_cast(load_tile(p_q, m_m, m_d, MASKED, not EVEN_D), MMA)  # [BM, BD]
    b_s = tl.dot(b_k, tl.trans(b_q), input_precision="ieee")  # [BN, BM] raw <k, q>
    if MASKED:
        b_lse2 = tl.load(Lse_bh + o_m, mask=m_m, other=float("-inf")) * 1.4426950408889634  # [BM]
    else:
        b_lse2 = tl.load(Lse_bh + o_m) * 1.4426950408889634
    if HAS_SOFTCAP:
        b_u = scores_log2(b_s, scale, softcap, HAS_SOFTCAP) - b_lse2[None, :]
    else:
        b_u = b_s * c2 - b_lse2[None, :]
    if MASKED:
        counted = m_m & (pos_q >= plen) & (b_lse2 != float("-inf"))  # a NaN row counts (and gives NaN)
        if HAS_MASK:
            counted = counted & (tl.load(p_km + pos_q, mask=m_m, other=0) != 0)
        vis = (o_n[:, None] <= pos_q[None, :]) & counted[None, :] & keep_k[:, None]  # [BN, BM]
        if HAS_WINDOW:
            vis = vis & (o_n[:, None] > pos_q[None, :] - window)
        b_u = tl.where(vis, b_u, float("-inf"))
        if COUNT:
            b_cnt += tl.sum(vis.to(tl.int32), 1)
    BN: tl.constexpr = b_u.shape[0]
    return b_sum + exp2_row_sums(b_u, BN, BLOCK_M, FMA_PARTS), b_cnt


@triton.jit
def col_step(
    start_m, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap, window,
    b_sum, b_cnt,
    MASKED: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, MMA: tl.constexpr, BLOCK_M: tl.constexpr,
    SPLIT_EXP: tl.constexpr,
):  # fmt: skip
    """One query tile; ``SPLIT_EXP`` (0, 2, 4, 8): 1 / ``SPLIT_EXP`` of its exponentials on FMAs."""
    # compile-time flags are passed one by one: a tuple of them is no constexpr when compiled
    return col_tile(
        start_m, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap,
        window, b_sum, b_cnt, MASKED, COUNT, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA, BLOCK_M,
        SPLIT_EXP,
    )  # fmt: skip


@triton.jit
def col_range(
    lo, hi, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale, softcap, window,
    b_sum, b_cnt,
    MASKED: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr,
    BLOCK_M: tl.constexpr, SPLIT_EXP: tl.constexpr,
):  # fmt: skip
    """Run `col_step` over the query tiles ``lo, lo + BLOCK_M, ... < hi``."""
    if WHILE:  # the interpreter cannot take runtime loop bounds in range()
        start_m = lo
        while start_m < hi:
            b_sum, b_cnt = col_step(
                start_m, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale,
                softcap, window, b_sum, b_cnt, MASKED, COUNT, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA,
                BLOCK_M, SPLIT_EXP,
            )  # fmt: skip
            start_m += BLOCK_M
    else:
        for start_m in range(lo, hi, BLOCK_M):
            b_sum, b_cnt = col_step(
                start_m, b_k, o_n, keep_k, p_q0, p_km, Lse_bh, plen, R, L, sqm, sqd, o_d, m_d, c2, scale,
                softcap, window, b_sum, b_cnt, MASKED, COUNT, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, MMA,
                BLOCK_M, SPLIT_EXP,
            )  # fmt: skip
    return b_sum, b_cnt


@triton.jit
def lookup(
    b_q, p_k0, p_km, pos_k, pos_q, valid, b_lse2, L, skn, skd, o_d, m_d, scale, softcap, window,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
):  # fmt: skip
    """``log2 p`` of key ``pos_k[r]`` for each row ``r`` (``-inf`` where the key is not visible)."""
    # [BM]; a NaN row (lse NaN) keeps its keys visible, so its lookups are NaN
    vis = valid & (pos_k >= 0) & (pos_k < L) & (pos_k <= pos_q) & (b_lse2 != float("-inf"))
    if HAS_WINDOW:
        vis = vis & (pos_k > pos_q - window)
    if HAS_MASK:
        vis = vis & (tl.load(p_km + pos_k, mask=vis, other=0) != 0)
    p_k = p_k0 + pos_k[:, None] * skn + o_d[None, :] * skd
    b_k = tl.load(p_k, mask=vis[:, None] & m_d[None, :], other=0.0).to(tl.float32)  # [BM, BD]
    b_s = scores_log2(tl.sum(b_q * b_k, 1), scale, softcap, HAS_SOFTCAP)  # [BM]
    return tl.where(vis, b_s - b_lse2, float("-inf"))


# ----------------------------------------------------------------------------------------------------
# Host side, shared by the launchers.


def interpreting() -> bool:
    """Whether Triton runs under its CPU interpreter (read at call time, never at import)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class LaunchGeometry:
    """Sizes and flags that every kernel of this package takes."""

    B: int
    Hq: int
    R: int
    L: int
    D: int
    group: int
    block_d: int
    mma: int
    key_mask: torch.Tensor
    """``[B, L] uint8`` (a dummy ``[1]`` tensor when there is no mask)."""
    mask_stride: int
    has_mask: bool
    has_softcap: bool
    has_window: bool
    softcap: float
    window: int


def launch_geometry(
    q: torch.Tensor,
    k: torch.Tensor,
    key_mask: torch.Tensor | None,
    softcap: float | None,
    window: int | None,
) -> LaunchGeometry:
    """Check what the kernels themselves need and derive the launch sizes and flags.

    Raises:
        ValueError: on tensors that are not 4-D, on another device than CUDA (outside the
            interpreter), on a head dim above 256, or on an unsupported dtype.
    """
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(
            f"expected q [B, Hq, R, D] and k [B, Hkv, L, D], got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    B, Hq, R, D = q.shape
    L, Hkv = k.shape[2], k.shape[1]
    if not interpreting() and q.device.type != "cuda":
        raise ValueError(f"the Triton backend expects CUDA tensors, got device {q.device}")
    if D > 256 or Hq % Hkv != 0 or q.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(
            f"expected D <= 256, Hq % Hkv == 0 and dtype in {_SUPPORTED_DTYPES}, got D={D}, "
            f"Hq={Hq}, Hkv={Hkv}, dtype={q.dtype}"
        )
    if interpreting() or q.dtype == torch.float32:
        mma = _MMA_FP32
    elif q.dtype == torch.float8_e5m2:
        mma = _MMA_FP16
    else:
        mma = _MMA_NATIVE
    if key_mask is None:
        km, mask_stride = torch.ones(1, dtype=torch.uint8, device=q.device), 0
    else:
        km = key_mask.to(device=q.device, dtype=torch.bool).contiguous().view(torch.uint8)
        mask_stride = km.stride(0)
    return LaunchGeometry(
        B=B, Hq=Hq, R=R, L=L, D=D, group=Hq // Hkv, block_d=max(16, triton.next_power_of_2(D)), mma=mma,
        key_mask=km, mask_stride=mask_stride, has_mask=key_mask is not None,
        has_softcap=softcap is not None, has_window=window is not None,
        softcap=1.0 if softcap is None else float(softcap), window=0 if window is None else int(window),
    )  # fmt: skip


def size_class(rows: int) -> int:
    """Coarse size bucket of a launch (query rows times heads) for the autotuning key: 0, 1 or 2."""
    return 0 if rows <= (1 << 16) else (1 if rows <= (1 << 19) else 2)


def d_class(block_d: int) -> int:
    """Head-dim class of the tuning tables: 64, 128 or 256."""
    return 64 if block_d <= 64 else (128 if block_d <= 128 else 256)


TUNE_KEY = ["BLOCK_D", "size_class", "HAS_MASK", "HAS_SOFTCAP", "HAS_WINDOW", "MMA", "VARLEN"]


def tune_configs(table: tuple[tuple[int, ...], ...], names: tuple[str, str]) -> list[triton.Config]:
    """Autotuning configs from ``(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg])`` candidates."""
    return [
        triton.Config(
            {names[0]: c[0], names[1]: c[1]},
            num_warps=c[2],
            num_stages=c[3],
            maxnreg=c[4] if len(c) > 4 else None,
        )
        for c in table
    ]


def pinned_config(table: tuple[tuple[int, ...], ...]) -> dict[str, int] | None:
    """The candidate that ``FLASHSTATS_CONFIG_INDEX`` pins (read at call time), or None to autotune.

    Pinning skips the tuning benchmarks: the GPU tests pin candidate 0, and the benchmarks' parallel
    pre-compilation pins each candidate in turn to fill Triton's on-disk cache. A candidate's optional
    fifth entry caps the registers per thread (``maxnreg``).

    Without a pin, ``torch.use_deterministic_algorithms(True)`` pins candidate 0: autotuning keeps the
    candidate that timed fastest, which can differ from one process to the next when two are close,
    and candidates with other tile sizes add the same terms in another order, so their outputs differ
    in the last bits (which a bf16 model carries on from layer to layer). Every candidate is exact to
    the same tolerance; a fixed one makes results bitwise reproducible across processes.
    """
    index = os.environ.get("FLASHSTATS_CONFIG_INDEX")
    if index is None or index == "":
        if not torch.are_deterministic_algorithms_enabled():
            return None
        index = "0"
    if not index.isdigit():
        raise ValueError(f"FLASHSTATS_CONFIG_INDEX must be a non-negative integer, got {index!r}")
    c = table[min(int(index), len(table) - 1)]
    cfg = {"BLOCK_M": c[0], "BLOCK_N": c[1], "num_warps": c[2], "num_stages": c[3]}
    if len(c) > 4:
        cfg["maxnreg"] = c[4]
    return cfg


def launch_sequences(
    g: LaunchGeometry, varlen: Varlen | None, *, key_major: bool = False
) -> tuple[torch.Tensor, int, int]:
    """``(Seq table, sequences, extent of the first grid axis)`` of a launch.

    A dense launch runs ``B`` sequences of ``R`` rows (``L`` keys for the key-major kernel); a packed
    one runs the table's sequences, its first grid axis sized for the longest.
    """
    if varlen is None:
        return g.key_mask, g.B, (g.L if key_major else g.R)
    return varlen.table, varlen.batch, (varlen.max_keys if key_major else varlen.max_rows)


def row_buffers(
    q: torch.Tensor,
    g: LaunchGeometry,
    varlen: Varlen | None,
    lead: tuple[int, ...] = (),
    trailing: tuple[int, ...] = (),
) -> tuple[torch.Tensor, bool]:
    """An empty ``[*lead, B, Hq, R, *trailing]`` float32 buffer, and whether uncovered rows exist.

    Rows of a packed launch that no sequence covers (``seqused_q``) read as rows that see no key: the
    buffer starts at zero for them (the caller fills an LSE with ``-inf``).
    """
    gaps = varlen is not None and not varlen.full_rows
    new = torch.zeros if gaps else torch.empty
    return new(*lead, g.B, g.Hq, g.R, *trailing, dtype=torch.float32, device=q.device), gaps
