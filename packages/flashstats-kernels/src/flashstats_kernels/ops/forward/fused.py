"""Fused response-stage forward: FlashAttention-2 over the response rows with T1 row statistics.

One program owns a tile of ``BLOCK_M`` response rows of one (batch, query head) pair and streams the
key/value tiles that the tile can see (bottom-right aligned causal mask, optional key mask, sliding
window). The row statistics are compile-time flags (``ROWS``); without them the kernel is a plain
attention forward (the paper's "Base"). Scores are kept in log2 units (``log2(e)`` folded into the
scale) so every exponential is an ``exp2``.

T1 accumulators per row, next to the running maximum ``m`` and normaliser ``l = sum 2^(s - m)``:
``a = sum 2^(s - m) (s - m)`` (entropy; shifted by ``m`` so that ``H = ln l - ln2 * a / l`` adds two
non-negative terms and never cancels), ``q2 = sum 2^(2 (s - m))`` (``sum p^2 = q2 / l^2``),
``pm = sum_{j < prompt_len} 2^(s - m)`` and ``n`` (visible keys). When ``m`` grows to ``m'`` with
``alpha = 2^(m - m')``: ``a <- alpha (a + l (m - m'))``, ``l <- alpha l``, ``q2 <- alpha^2 q2``,
``pm <- alpha pm``, before the tile's own terms are added.

The entropy term ``2^u u`` needs ``0 * -inf = 0`` where a weight is zero; T1 clamps ``u`` for that on masked
key tiles only. An interior tile's scores are finite for finite inputs; a row tile that met a ``-inf``
score there (its entropy sum NaN, ``l`` finite) is recomputed with the clamp on every tile.

The key-tile step (`fwd_tile`, `fwd_range`) and the launcher helpers live in ``ops._fused``, shared
with the T2, T3 and decoding kernels.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import Varlen, fold_scale_sign
from flashstats_kernels.ops._fused import (
    T1_GUARD_ALWAYS,
    TUNE_KEY,
    d_class,
    fwd_inner,
    fwd_range,
    interpreting,
    launch_geometry,
    launch_sequences,
    load_tile,
    mma_cast,
    packed_sequence,
    pinned_config,
    row_buffers,
    size_class,
    tune_configs,
)
from flashstats_kernels.types import RowStats


@triton.jit
def _store_out(p_o, b_acc, b_ls, b_nan, o_d, m_m, m_d, sod):
    """Store ``acc / l`` (NaN rows stay NaN) at the rows ``p_o [BM, 1]`` and head-dim columns ``o_d``."""
    b_o = b_acc / b_ls[:, None] + b_nan[:, None]  # [BM, BD]
    tl.store(p_o + o_d[None, :] * sod, b_o.to(p_o.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])


@triton.jit
def _key_tiles(
    first, window, L, args, st,
    EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, GUARD: tl.constexpr,
):  # fmt: skip
    """Every key tile that the row tile starting at position ``first`` sees; returns the state ``st``.

    ``args`` are `fwd_tile`'s leading arguments, ``st`` its running state. ``GUARD``: `fwd_tile`.
    """
    hi = tl.minimum(first + BLOCK_M, L)  # one past the last visible key of the tile
    lo = 0
    if HAS_WINDOW:  # key tiles wholly before every row's window are never loaded: O(L * w) work
        lo = tl.maximum(first - window + 1, 0) // BLOCK_N * BLOCK_N
    if HAS_MASK:  # every tile tests visibility
        st = fwd_range(
            lo, hi, *args, *st, True, 2, True, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT,
        )  # fmt: skip
    else:  # only the window's lower edge and the diagonal tiles need a mask; interior tiles run unmasked
        mid = (first + 1) // BLOCK_N * BLOCK_N  # key tiles below it are at or before every row
        inner = lo
        if HAS_WINDOW:  # first key tile inside the window of every row of the tile
            edge = tl.maximum(first + BLOCK_M - window, 0)
            inner = tl.minimum(tl.maximum((edge + BLOCK_N - 1) // BLOCK_N * BLOCK_N, lo), mid)
            st = fwd_range(
                lo, inner, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA,
                WHILE, BLOCK_N, SPLIT,
            )  # fmt: skip
        st = fwd_inner(
            inner, mid, *args, *st, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE, BLOCK_N,
            SPLIT, False, None, None, False, GUARD,
        )  # fmt: skip
        st = fwd_range(
            mid, hi, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, SPLIT,
        )  # fmt: skip
    return st


@triton.jit(do_not_specialize=["R", "L", "window", "stat_stride", "size_class"])
def _fwd_kernel(
    Q, K, V, Out, Lse, Stats, KeyMask, PromptLen, Seq,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod, smb,
    Hq, R, L, scale, softcap, window, stat_stride, size_class,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr,
    VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DT: tl.constexpr,
):  # fmt: skip
    # BLOCK_DT > 0: the head dim runs as a BLOCK_D-wide head plus a BLOCK_DT-wide tail (`ops._fused._qk`)
    SPLIT: tl.constexpr = BLOCK_DT > 0
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)
    i_b = i_bh // Hq  # batch element (VARLEN: packed sequence)
    i_h = i_bh % Hq
    o_row0 = i_bh * R  # first row of (i_b, i_h) in the [B, Hq, R] statistics
    q0, k0, i_t = 0, 0, i_b  # first row and key of the sequence, its batch index in the tensors
    if VARLEN:  # the tensors are [1, H, T, D] and the statistics [1, Hq, TQ] (R = TQ, L = TK)
        o_row0 = i_h * R
        q0, R, k0, L = packed_sequence(Seq, i_b)
        o_row0 += q0
        i_t = 0
        if i_m * BLOCK_M >= R:
            return
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    m_m = o_m < R
    EVEN_D: tl.constexpr = D == BLOCK_D + BLOCK_DT  # (the tail's columns when split)
    pos_q = L - R + o_m  # [BM] positions of the rows in their sequence
    p_q = Q + i_t * sqb + i_h * sqh + (q0 + o_m[:, None]) * sqm  # [BM, 1]
    o_d = tl.arange(0, BLOCK_D)  # [BD] (the head's columns when split)
    m_d = o_d < D
    b_q = mma_cast(load_tile(p_q + o_d[None, :] * sqd, m_m, m_d, True, not EVEN_D), MMA)  # [BM, BD]
    b_acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if SPLIT:  # (head, tail) pairs: [BM, BD] + [BM, BDT]
        o_dt = BLOCK_D + tl.arange(0, BLOCK_DT)  # [BDT]
        m_dt = o_dt < D
        b_qt = mma_cast(load_tile(p_q + o_dt[None, :] * sqd, m_m, m_dt, True, not EVEN_D), MMA)
        b_q, o_d, m_d = (b_q, b_qt), (o_d, o_dt), (m_d, m_dt)
        b_acc = (b_acc, tl.zeros([BLOCK_M, BLOCK_DT], tl.float32))
    p_k0 = K + i_t * skb + (i_h // GROUP) * skh + k0 * skn
    p_v0 = V + i_t * svb + (i_h // GROUP) * svh + k0 * svn
    p_km = KeyMask + i_t * smb + k0
    plen = tl.load(PromptLen + i_b)
    c2 = scale * 1.4426950408889634  # scale in log2 units

    b_mx = tl.full([BLOCK_M], -1.0e30, tl.float32)  # running max (log2 units); finite: no -inf - -inf
    b_l = tl.zeros([BLOCK_M], tl.float32)
    b_a = tl.zeros([BLOCK_M], tl.float32)
    b_q2 = tl.zeros([BLOCK_M], tl.float32)
    b_pm = tl.zeros([BLOCK_M], tl.float32)
    b_n = tl.zeros([BLOCK_M], tl.int32)
    st = (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n)
    args = (b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window)

    first = L - R + i_m * BLOCK_M  # position of the tile's first row
    # rows without a key mask skip T1's zero-weight clamp on interior tiles (FAST); a row whose entropy
    # sum came out NaN with a finite l met a -inf score there (an infinite input): the tile is redone
    # with the clamp on every tile, so the rule of SEMANTICS.md holds at no cost to finite inputs
    FAST: tl.constexpr = ROWS and not HAS_MASK and not T1_GUARD_ALWAYS
    st0 = st
    st = _key_tiles(
        first, window, L, args, st0, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE, BLOCK_M,
        BLOCK_N, SPLIT, not FAST,
    )  # fmt: skip
    if FAST:
        lost = (st[3] != st[3]) & (st[1] == st[1])  # [BM] NaN entropy sum, l not NaN
        if tl.max(lost.to(tl.int32), 0) > 0:
            st = _key_tiles(
                first, window, L, args, st0, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
                BLOCK_M, BLOCK_N, SPLIT, True,
            )  # fmt: skip
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = st

    has = b_l > 0.0  # the row sees at least one key
    b_ls = tl.where(has, b_l, 1.0)
    # l is NaN iff a visible score was NaN or +inf: such a row is NaN everywhere (SEMANTICS.md)
    b_nan = tl.where(b_l != b_l, float("nan"), 0.0)  # [BM]
    p_o = Out + i_t * sob + i_h * soh + (q0 + o_m[:, None]) * som  # [BM, 1]
    if SPLIT:
        _store_out(p_o, b_acc[0], b_ls, b_nan, o_d[0], m_m, m_d[0], sod)
        _store_out(p_o, b_acc[1], b_ls, b_nan, o_d[1], m_m, m_d[1], sod)
    else:
        _store_out(p_o, b_acc, b_ls, b_nan, o_d, m_m, m_d, sod)
    o_row = o_row0 + o_m  # [BM] offsets into [B, Hq, R]
    b_lse = tl.where(has, (b_mx + tl.log2(b_ls)) * 0.6931471805599453, float("-inf")) + b_nan
    tl.store(Lse + o_row, b_lse, mask=m_m)
    if ROWS:
        if not HAS_MASK:  # visible keys are known without counting
            b_n = pos_q + 1
            if HAS_WINDOW:
                b_n = tl.minimum(b_n, window)
        b_ent = tl.where(has, tl.log(b_ls) - b_a / b_ls * 0.6931471805599453, 0.0) + b_nan
        b_nf = tl.maximum(b_n.to(tl.float32), 2.0)
        tl.store(Stats + o_row, b_ent, mask=m_m)
        b_norm = tl.where(b_n > 1, b_ent / tl.log(b_nf), 0.0) + b_nan
        tl.store(Stats + stat_stride + o_row, b_norm, mask=m_m)
        tl.store(Stats + 2 * stat_stride + o_row, b_pm / b_ls + b_nan, mask=m_m)
        tl.store(Stats + 3 * stat_stride + o_row, tl.where(has, 1.0 / b_ls, 0.0) + b_nan, mask=m_m)
        b_q2s = tl.where(has, b_q2, 1.0)
        tl.store(Stats + 4 * stat_stride + o_row, tl.where(has, b_ls * b_ls / b_q2s, 0.0) + b_nan, mask=m_m)


# ----------------------------------------------------------------------------------------------------
# Host side, shared by the three launchers.


# (BLOCK_M, BLOCK_N, num_warps, num_stages) candidates per head-dim class: a short list each, so that
# tuning one new key costs a few compilations and benchmarks.
_FORWARD_TABLES = {
    # the fifth d = 64 candidate caps T1 at 128 registers (2 CTAs per SM, no spills): T1 / Base 1.32 ->
    # 1.24-1.26 at 16K-32K, r = 0.3 (H200, 2026-12-01); Base already fits in 128
    64: ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 2), (64, 64, 4, 2), (128, 64, 8, 3, 128)),
    # split head dims 80 = 64 + 16 and 96 = 64 + 32: capped at 128 registers (2 CTAs per SM), Base runs
    # 1.39-1.64x SDPA-FA2 against 1.18-1.27x uncapped at 16K-32K, r = 0.3 (H200, 2026-12-01)
    96: ((128, 64, 8, 3, 128), (128, 64, 8, 2, 128), (128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2)),
    128: ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 8, 2)),
    256: ((64, 32, 8, 2), (64, 64, 8, 2), (64, 32, 8, 3), (128, 32, 8, 2)),
}


@functools.cache
def _tuned_forward(d_class: int):
    """The forward kernel autotuned over the candidates of one head-dim class (built on first use)."""
    configs = tune_configs(_FORWARD_TABLES[d_class], ("BLOCK_M", "BLOCK_N"))
    return triton.autotune(configs, key=[*TUNE_KEY, "ROWS", "BLOCK_DT"])(_fwd_kernel)


def split_head_dim(d: int) -> tuple[int, int]:
    """``(BLOCK_D, BLOCK_DT)`` of the forward: the head dim as one padded block, or a head plus a tail.

    A head dim that is a power of two plus a narrower power of two (>= 16, ``tl.dot``'s minimum) runs as
    those two blocks instead of one zero-padded block: d = 80 is 64 + 16 and d = 96 is 64 + 32 (not 128),
    d = 160 is 128 + 32, d = 192 is 128 + 64. Other head dims (72, 112, ...) stay padded: a split with a
    masked tail passed on the interpreter but gave wrong outputs on the H200 at d = 72 (2026-12-01).
    ``FLASHSTATS_SPLIT_D=0`` (read at call time) turns the split off, to compare the two.

    Args:
        d: head dim, 1 to 256.

    Returns:
        ``(block_d, 0)`` for one padded block, or ``(head, tail)`` with ``head + tail == d``.
    """
    padded = max(16, triton.next_power_of_2(d))
    head = padded // 2
    tail = d - head
    exact = head >= 16 and tail >= 16 and tail == triton.next_power_of_2(tail)
    if not exact or tail == head or os.environ.get("FLASHSTATS_SPLIT_D") == "0":
        return padded, 0
    return head, tail


def tune_class(block_d: int, block_dt: int) -> int:
    """Tuning table of a forward launch: the head-dim class, or 96 for a head dim split out of 128."""
    return 96 if block_dt and block_d + block_dt <= 128 and block_d >= 64 else d_class(block_d + block_dt)


def forward_config(dtype: torch.dtype, block_d: int, table: int | None = None) -> dict[str, int] | None:
    """Fixed tile sizes of the forward, or None when the kernel is autotuned (CUDA, 16-bit inputs).

    The interpreter runs one small config; fp32 and fp8-e5m2 inputs (fp32 or fp16 dot operands) run a
    fixed config; bf16 and fp16 are autotuned over `_FORWARD_TABLES` once per key (head-dim
    class, statistic and mask flags, coarse size).
    """
    if interpreting():
        return {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    if dtype == torch.float8_e5m2:
        return {"BLOCK_M": 64 if block_d > 128 else 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    return pinned_config(_FORWARD_TABLES[d_class(block_d) if table is None else table])


def forward_triton(
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
    varlen: Varlen | None = None,
) -> tuple[torch.Tensor, torch.Tensor, RowStats | None]:
    """Response-stage attention forward with optional fused T1 row statistics.

    Args:
        q: [B, Hq, R, D] bf16/fp16/fp8-e5m2/fp32. Queries of the last ``R`` positions; any strides.
        k: [B, Hkv, L, D] same dtype. Keys; ``Hq % Hkv == 0``; any strides.
        v: [B, Hkv, L, D] same dtype. Values; any strides.
        key_mask: [B, L] bool or None. True marks a real key.
        prompt_len: [B] int64 on the device of ``q`` (``[N]`` when packed). Keys ``j < prompt_len[b]``
            are prompt keys.
        scale: score scale (``1/sqrt(D)`` for standard attention).
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window ``w`` (key ``j`` visible from position ``p`` iff ``p - w < j``), or None.
        rows: whether to compute the T1 row statistics.
        varlen: packed sequences (``B = 1``: q is ``[1, Hq, TQ, D]``, k and v ``[1, Hkv, TK, D]``, and
            sequence ``b`` owns the rows and keys its table entry names), or None.

    Returns:
        ``(out, lse, row_stats)``: out [B, Hq, R, D] in q's dtype; lse [B, Hq, R] float32 natural log
        (``-inf`` on rows that see no key); [`RowStats`][flashstats_kernels.RowStats] of [B, Hq, R] float32
        tensors, or None when ``rows`` is False. A packed launch returns ``out`` with ``[TQ, Hq, D]`` storage.

    Shape:
        q: [B, Hq, R, D]; k, v: [B, Hkv, L, D]; out: [B, Hq, R, D]; lse: [B, Hq, R].
    """
    q, scale = fold_scale_sign(q, scale)
    g = launch_geometry(q, k, key_mask, softcap, window)
    lse, gaps = row_buffers(q, g, varlen)
    stats, _ = row_buffers(q, g, varlen, lead=(5 if rows else 1,))
    if varlen is None:
        out = torch.empty(g.B, g.Hq, g.R, g.D, dtype=q.dtype, device=q.device)
    else:  # token-major, as FlashAttention's varlen functions return it
        new = torch.zeros if gaps else torch.empty
        out = new(g.R, g.Hq, g.D, dtype=q.dtype, device=q.device).permute(1, 0, 2)[None]
        if gaps:
            lse.fill_(float("-inf"))
    seq, n_seq, extent = launch_sequences(g, varlen)
    if out.numel() > 0 and n_seq > 0:
        block_d, block_dt = split_head_dim(g.D)
        table = tune_class(block_d, block_dt)
        cfg = forward_config(q.dtype, g.block_d, table)
        kernel = _fwd_kernel if cfg is not None else _tuned_forward(table)
        grid = lambda meta: (triton.cdiv(extent, meta["BLOCK_M"]), n_seq * g.Hq)  # noqa: E731
        kernel[grid](
            q, k, v, out, lse, stats, g.key_mask, prompt_len.contiguous(), seq,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), g.mask_stride,
            g.Hq, g.R, g.L, float(scale), g.softcap, g.window, stats.stride(0), size_class(g.B * g.Hq * g.R),
            D=g.D, GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
            ROWS=rows, MMA=g.mma, WHILE=interpreting(), VARLEN=varlen is not None, BLOCK_D=block_d,
            BLOCK_DT=block_dt, **(cfg or {}),
        )  # fmt: skip
    if not rows:
        return out, lse, None
    ent, norm, pmass, maxw, eff = stats.unbind(0)
    return (
        out,
        lse,
        RowStats(
            entropy=ent, normalized_entropy=norm, prompt_mass=pmass, max_weight=maxw, effective_support=eff
        ),
    )


__all__ = ["forward_triton"]
