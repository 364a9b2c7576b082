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

The helpers at the top (`_scores_log2`, `_mma_cast` and the launcher helpers) are shared
by the T2 and T3 kernels of ``ops.lookups.fused`` and ``ops.columns.fused``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import Varlen, fold_scale_sign
from flashstats_kernels.types import RowStats

_MMA_NATIVE, _MMA_FP16, _MMA_FP32 = 0, 1, 2
_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e5m2)


@triton.jit
def _scores_log2(raw, scale, softcap, HAS_SOFTCAP: tl.constexpr):
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
def _mma_cast(x, MMA: tl.constexpr):
    """Operand dtype of ``tl.dot``: native, fp16 (exact for fp8-e5m2 inputs) or fp32 (interpreter, fp32)."""
    if MMA == 1:
        x = x.to(tl.float16)
    if MMA == 2:
        x = x.to(tl.float32)
    return x


@triton.jit
def _load_tile(ptr, m_a, m_b, MASK_A: tl.constexpr, MASK_B: tl.constexpr):
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
def _fwd_tile(
    start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    MASKED: tl.constexpr, PM: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr,
    MMA: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One key/value tile: online softmax and T1 accumulators (``MASKED`` off on interior tiles).

    ``PM`` says how the tile adds to the prompt mass: 0 no key is a prompt key, 1 every key is, 2 test
    each key. ``COUNT`` counts visible keys (only needed with a key mask; otherwise ``n`` is known).
    """
    o_n = start_n + tl.arange(0, BLOCK_N)  # [BN]
    m_n = o_n < L
    b_kt = _mma_cast(
        _load_tile(p_k0 + o_d[:, None] * skd + o_n[None, :] * skn, m_d, m_n, not EVEN_D, MASKED), MMA
    )
    b_s = tl.dot(b_q, b_kt, input_precision="ieee")  # [BM, BN] raw <q, k>
    if HAS_SOFTCAP:
        b_s = _scores_log2(b_s, scale, softcap, HAS_SOFTCAP)  # log2 units
    if MASKED:
        vis = (o_n[None, :] <= pos_q[:, None]) & m_n[None, :]  # [BM, BN]
        if HAS_WINDOW:
            vis = vis & (o_n[None, :] > pos_q[:, None] - window)
        if HAS_MASK:
            vis = vis & (tl.load(p_km + o_n, mask=m_n, other=0) != 0)[None, :]
        b_s = tl.where(vis, b_s, float("-inf"))
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
        b_u = tl.where(b_p > 0.0, b_u, 0.0)  # invisible keys and -inf scores: 0 log 0 = 0
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
    b_v = _mma_cast(
        _load_tile(p_v0 + o_n[:, None] * svn + o_d[None, :] * svd, m_n, m_d, MASKED, not EVEN_D), MMA
    )
    b_acc = tl.dot(b_p.to(b_v.dtype), b_v, b_acc * alpha[:, None], input_precision="ieee")
    return b_mx_new, b_l, b_acc, b_a, b_q2, b_pm, b_n


@triton.jit
def _fwd_range(
    lo, hi, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    MASKED: tl.constexpr, PM: tl.constexpr, COUNT: tl.constexpr, EVEN_D: tl.constexpr,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr,
    MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Run `_fwd_tile` over the key tiles ``lo, lo + BLOCK_N, ... < hi``."""
    if WHILE:  # the interpreter cannot take runtime loop bounds in range()
        start_n = lo
        while start_n < hi:
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _fwd_tile(
                start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale,
                softcap, window, b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n, MASKED, PM, COUNT, EVEN_D,
                HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, BLOCK_N,
            )  # fmt: skip
            start_n += BLOCK_N
    else:
        for start_n in range(lo, hi, BLOCK_N):
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _fwd_tile(
                start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale,
                softcap, window, b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n, MASKED, PM, COUNT, EVEN_D,
                HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, BLOCK_N,
            )  # fmt: skip
    return b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n


@triton.jit
def _fwd_inner(
    lo, hi, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    EVEN_D: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Unmasked key tiles ``lo <= j < hi``: every key visible to every row of the tile.

    With the row statistics on, the range is split at the prompt boundary so that only one tile tests
    ``j < prompt_len``.
    """
    # compile-time flags are passed one by one: a tuple of them is no constexpr when compiled
    a = (b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window)
    st = (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n)
    if ROWS:
        pa = tl.minimum(tl.maximum(plen // BLOCK_N * BLOCK_N, lo), hi)  # keys below pa are prompt keys
        pb = tl.minimum(pa + BLOCK_N, hi)  # keys from pb on are not
        st = _fwd_range(
            lo, pa, *a, *st, False, 1, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
        st = _fwd_range(
            pa, pb, *a, *st, False, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
        st = _fwd_range(
            pb, hi, *a, *st, False, 0, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
    else:
        st = _fwd_range(
            lo, hi, *a, *st, False, 0, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
    return st


@triton.jit
def _packed_sequence(Seq, i_b):
    """``(q0, R_b, k0, L_b)`` of packed sequence ``i_b``: rows ``[q0, q0 + R_b)``, keys ``[k0, k0 + L_b)``.

    ``Seq`` is the ``[N, 4] int64`` table of a packed (varlen) launch; its tensors hold every sequence
    on the token axis of batch 0.
    """
    p_s = Seq + i_b * 4
    return tl.load(p_s), tl.load(p_s + 1).to(tl.int32), tl.load(p_s + 2), tl.load(p_s + 3).to(tl.int32)


@triton.jit(do_not_specialize=["R", "L", "window", "stat_stride", "size_class"])
def _fwd_kernel(
    Q, K, V, Out, Lse, Stats, KeyMask, PromptLen, Seq,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod, smb,
    Hq, R, L, scale, softcap, window, stat_stride, size_class,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr,
    VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)
    i_b = i_bh // Hq  # batch element (VARLEN: packed sequence)
    i_h = i_bh % Hq
    o_row0 = i_bh * R  # first row of (i_b, i_h) in the [B, Hq, R] statistics
    q0, k0, i_t = 0, 0, i_b  # first row and key of the sequence, its batch index in the tensors
    if VARLEN:  # the tensors are [1, H, T, D] and the statistics [1, Hq, TQ] (R = TQ, L = TK)
        o_row0 = i_h * R
        q0, R, k0, L = _packed_sequence(Seq, i_b)
        o_row0 += q0
        i_t = 0
        if i_m * BLOCK_M >= R:
            return
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    o_d = tl.arange(0, BLOCK_D)  # [BD]
    m_m = o_m < R
    m_d = o_d < D
    EVEN_D: tl.constexpr = D == BLOCK_D
    pos_q = L - R + o_m  # [BM] positions of the rows in their sequence
    p_q = Q + i_t * sqb + i_h * sqh + (q0 + o_m[:, None]) * sqm + o_d[None, :] * sqd
    b_q = _mma_cast(_load_tile(p_q, m_m, m_d, True, not EVEN_D), MMA)  # [BM, BD]
    p_k0 = K + i_t * skb + (i_h // GROUP) * skh + k0 * skn
    p_v0 = V + i_t * svb + (i_h // GROUP) * svh + k0 * svn
    p_km = KeyMask + i_t * smb + k0
    plen = tl.load(PromptLen + i_b)
    c2 = scale * 1.4426950408889634  # scale in log2 units

    b_mx = tl.full([BLOCK_M], -1.0e30, tl.float32)  # running max (log2 units); finite: no -inf - -inf
    b_l = tl.zeros([BLOCK_M], tl.float32)
    b_acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    b_a = tl.zeros([BLOCK_M], tl.float32)
    b_q2 = tl.zeros([BLOCK_M], tl.float32)
    b_pm = tl.zeros([BLOCK_M], tl.float32)
    b_n = tl.zeros([BLOCK_M], tl.int32)
    st = (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n)
    args = (b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, c2, scale, softcap, window)

    first = L - R + i_m * BLOCK_M  # position of the tile's first row
    hi = tl.minimum(first + BLOCK_M, L)  # one past the last visible key of the tile
    lo = 0
    if HAS_WINDOW:  # key tiles wholly before every row's window are never loaded: O(L * w) work
        lo = tl.maximum(first - window + 1, 0) // BLOCK_N * BLOCK_N
    if HAS_MASK:  # every tile tests visibility
        st = _fwd_range(
            lo, hi, *args, *st, True, 2, True, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
    else:  # only the window's lower edge and the diagonal tiles need a mask; interior tiles run unmasked
        mid = (first + 1) // BLOCK_N * BLOCK_N  # key tiles below it are at or before every row
        inner = lo
        if HAS_WINDOW:  # first key tile inside the window of every row of the tile
            edge = tl.maximum(first + BLOCK_M - window, 0)
            inner = tl.minimum(tl.maximum((edge + BLOCK_N - 1) // BLOCK_N * BLOCK_N, lo), mid)
            st = _fwd_range(
                lo, inner, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA,
                WHILE, BLOCK_N,
            )  # fmt: skip
        st = _fwd_inner(
            inner, mid, *args, *st, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE, BLOCK_N
        )
        st = _fwd_range(
            mid, hi, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N,
        )  # fmt: skip
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = st

    has = b_l > 0.0  # the row sees at least one key
    b_ls = tl.where(has, b_l, 1.0)
    # l is NaN iff a visible score was NaN or +inf: such a row is NaN everywhere (SEMANTICS.md)
    b_nan = tl.where(b_l != b_l, float("nan"), 0.0)  # [BM]
    b_o = b_acc / b_ls[:, None] + b_nan[:, None]  # [BM, BD]
    p_o = Out + i_t * sob + i_h * soh + (q0 + o_m[:, None]) * som + o_d[None, :] * sod
    tl.store(p_o, b_o.to(Out.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])
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


def _configs(table: tuple[tuple[int, int, int, int], ...], names: tuple[str, str]) -> list[triton.Config]:
    return [triton.Config({names[0]: a, names[1]: b}, num_warps=w, num_stages=st) for a, b, w, st in table]


# (BLOCK_M, BLOCK_N, num_warps, num_stages) candidates per head-dim class: a short list each, so that
# tuning one new key costs a few compilations and benchmarks.
_FORWARD_TABLES = {
    64: ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 2), (64, 64, 4, 2)),
    128: ((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 8, 2)),
    256: ((64, 32, 8, 2), (64, 64, 8, 2), (64, 32, 8, 3), (128, 32, 8, 2)),
}
_TUNE_KEY = ["BLOCK_D", "size_class", "HAS_MASK", "HAS_SOFTCAP", "HAS_WINDOW", "MMA", "VARLEN"]


@functools.cache
def _tuned_forward(d_class: int):
    """The forward kernel autotuned over the candidates of one head-dim class (built on first use)."""
    configs = _configs(_FORWARD_TABLES[d_class], ("BLOCK_M", "BLOCK_N"))
    return triton.autotune(configs, key=[*_TUNE_KEY, "ROWS"])(_fwd_kernel)


def d_class(block_d: int) -> int:
    """Head-dim class of the tuning tables: 64, 128 or 256."""
    return 64 if block_d <= 64 else (128 if block_d <= 128 else 256)


def forward_config(dtype: torch.dtype, block_d: int) -> dict[str, int] | None:
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
    return pinned_config(_FORWARD_TABLES[d_class(block_d)])


def pinned_config(table: tuple[tuple[int, int, int, int], ...]) -> dict[str, int] | None:
    """The candidate that ``FLASHSTATS_CONFIG_INDEX`` pins (read at call time), or None to autotune.

    Pinning skips the tuning benchmarks: the GPU tests pin candidate 0, and the benchmarks' parallel
    pre-compilation pins each candidate in turn to fill Triton's on-disk cache.
    """
    index = os.environ.get("FLASHSTATS_CONFIG_INDEX")
    if index is None or index == "":
        return None
    if not index.isdigit():
        raise ValueError(f"FLASHSTATS_CONFIG_INDEX must be a non-negative integer, got {index!r}")
    bm, bn, warps, stages = table[min(int(index), len(table) - 1)]
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


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
        cfg = forward_config(q.dtype, g.block_d)
        kernel = _fwd_kernel if cfg is not None else _tuned_forward(d_class(g.block_d))
        grid = lambda meta: (triton.cdiv(extent, meta["BLOCK_M"]), n_seq * g.Hq)  # noqa: E731
        kernel[grid](
            q, k, v, out, lse, stats, g.key_mask, prompt_len.contiguous(), seq,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), g.mask_stride,
            g.Hq, g.R, g.L, float(scale), g.softcap, g.window, stats.stride(0), size_class(g.B * g.Hq * g.R),
            D=g.D, GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
            ROWS=rows, MMA=g.mma, WHILE=interpreting(), VARLEN=varlen is not None, BLOCK_D=g.block_d,
            **(cfg or {}),
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
