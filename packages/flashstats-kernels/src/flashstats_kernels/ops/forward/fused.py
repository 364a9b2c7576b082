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

The helpers at the top (:func:`_scores_log2`, :func:`_mma_cast` and the launcher helpers) are shared
by the T2 and T3 kernels of ``ops.lookups.fused`` and ``ops.columns.fused``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

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
def _fwd_tile(
    start_n, b_q, pos_q, p_k0, p_v0, p_km, plen, L, skn, skd, svn, svd, o_d, m_d, scale, softcap, window,
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n,
    HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr,
    MMA: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One key/value tile of the forward: online-softmax and T1 accumulator update."""
    o_n = start_n + tl.arange(0, BLOCK_N)  # [BN]
    m_n = o_n < L
    p_kt = p_k0 + o_n[None, :] * skn + o_d[:, None] * skd
    b_kt = _mma_cast(tl.load(p_kt, mask=m_n[None, :] & m_d[:, None], other=0.0), MMA)  # [BD, BN]
    b_s = _scores_log2(tl.dot(b_q, b_kt, input_precision="ieee"), scale, softcap, HAS_SOFTCAP)  # [BM, BN]
    vis = (o_n[None, :] <= pos_q[:, None]) & m_n[None, :]  # [BM, BN]
    if HAS_WINDOW:
        vis = vis & (o_n[None, :] > pos_q[:, None] - window)
    if HAS_MASK:
        keep = tl.load(p_km + o_n, mask=m_n, other=0) != 0  # [BN]
        vis = vis & keep[None, :]
    b_s = tl.where(vis, b_s, float("-inf"))
    b_mx_new = tl.maximum(b_mx, tl.max(b_s, 1))  # [BM]
    alpha = tl.exp2(b_mx - b_mx_new)  # [BM]
    b_p = tl.exp2(b_s - b_mx_new[:, None])  # [BM, BN], 0 where not visible
    if ROWS:
        b_u = tl.where(vis, b_s - b_mx_new[:, None], 0.0)  # [BM, BN]
        b_a = alpha * (b_a + b_l * (b_mx - b_mx_new)) + tl.sum(b_p * b_u, 1)
        b_q2 = alpha * alpha * b_q2 + tl.sum(b_p * b_p, 1)
        b_pm = alpha * b_pm + tl.sum(tl.where(o_n[None, :] < plen, b_p, 0.0), 1)
        b_n += tl.sum(vis.to(tl.int32), 1)
    b_l = alpha * b_l + tl.sum(b_p, 1)
    p_vv = p_v0 + o_n[:, None] * svn + o_d[None, :] * svd
    b_v = _mma_cast(tl.load(p_vv, mask=m_n[:, None] & m_d[None, :], other=0.0), MMA)  # [BN, BD]
    b_acc = tl.dot(b_p.to(b_v.dtype), b_v, b_acc * alpha[:, None], input_precision="ieee")
    b_mx = b_mx_new
    return b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n


@triton.jit
def _fwd_kernel(
    Q, K, V, Out, Lse, Stats, KeyMask, PromptLen,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod, smb,
    Hq, R, L, D, scale, softcap, window, stat_stride,
    GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ROWS: tl.constexpr, MMA: tl.constexpr, WHILE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)
    i_b = i_bh // Hq
    i_h = i_bh % Hq
    i_hk = i_h // GROUP
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    o_d = tl.arange(0, BLOCK_D)  # [BD]
    m_m = o_m < R
    m_d = o_d < D
    pos_q = L - R + o_m  # [BM] absolute positions of the rows
    p_q = Q + i_b * sqb + i_h * sqh + o_m[:, None] * sqm + o_d[None, :] * sqd
    b_q = _mma_cast(tl.load(p_q, mask=m_m[:, None] & m_d[None, :], other=0.0), MMA)  # [BM, BD]
    p_k0 = K + i_b * skb + i_hk * skh
    p_v0 = V + i_b * svb + i_hk * svh
    p_km = KeyMask + i_b * smb
    plen = tl.load(PromptLen + i_b)

    b_mx = tl.full([BLOCK_M], -1.0e30, tl.float32)  # running max (log2 units); finite: no -inf - -inf
    b_l = tl.zeros([BLOCK_M], tl.float32)
    b_acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    b_a = tl.zeros([BLOCK_M], tl.float32)
    b_q2 = tl.zeros([BLOCK_M], tl.float32)
    b_pm = tl.zeros([BLOCK_M], tl.float32)
    b_n = tl.zeros([BLOCK_M], tl.int32)

    hi = tl.minimum(L - R + (i_m + 1) * BLOCK_M, L)  # one past the last visible key of the tile
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(L - R + i_m * BLOCK_M - window + 1, 0) // BLOCK_N * BLOCK_N
    if WHILE:  # the interpreter cannot take runtime loop bounds in range()
        start_n = lo
        while start_n < hi:
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _fwd_tile(
                start_n,
                b_q,
                pos_q,
                p_k0,
                p_v0,
                p_km,
                plen,
                L,
                skn,
                skd,
                svn,
                svd,
                o_d,
                m_d,
                scale,
                softcap,
                window,
                b_mx,
                b_l,
                b_acc,
                b_a,
                b_q2,
                b_pm,
                b_n,
                HAS_MASK,
                HAS_SOFTCAP,
                HAS_WINDOW,
                ROWS,
                MMA,
                BLOCK_N,
            )
            start_n += BLOCK_N
    else:
        for start_n in range(lo, hi, BLOCK_N):
            b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _fwd_tile(
                start_n,
                b_q,
                pos_q,
                p_k0,
                p_v0,
                p_km,
                plen,
                L,
                skn,
                skd,
                svn,
                svd,
                o_d,
                m_d,
                scale,
                softcap,
                window,
                b_mx,
                b_l,
                b_acc,
                b_a,
                b_q2,
                b_pm,
                b_n,
                HAS_MASK,
                HAS_SOFTCAP,
                HAS_WINDOW,
                ROWS,
                MMA,
                BLOCK_N,
            )

    has = b_l > 0.0  # the row sees at least one key
    b_ls = tl.where(has, b_l, 1.0)
    b_o = b_acc / b_ls[:, None]  # [BM, BD]
    p_o = Out + i_b * sob + i_h * soh + o_m[:, None] * som + o_d[None, :] * sod
    tl.store(p_o, b_o.to(Out.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])
    o_row = i_bh * R + o_m  # [BM] offsets into [B, Hq, R]
    b_lse = tl.where(has, (b_mx + tl.log2(b_ls)) * 0.6931471805599453, float("-inf"))
    tl.store(Lse + o_row, b_lse, mask=m_m)
    if ROWS:
        b_ent = tl.where(has, tl.log(b_ls) - b_a / b_ls * 0.6931471805599453, 0.0)
        b_nf = tl.maximum(b_n.to(tl.float32), 2.0)
        tl.store(Stats + o_row, b_ent, mask=m_m)
        tl.store(Stats + stat_stride + o_row, tl.where(b_n > 1, b_ent / tl.log(b_nf), 0.0), mask=m_m)
        tl.store(Stats + 2 * stat_stride + o_row, b_pm / b_ls, mask=m_m)
        tl.store(Stats + 3 * stat_stride + o_row, tl.where(has, 1.0 / b_ls, 0.0), mask=m_m)
        b_q2s = tl.where(has, b_q2, 1.0)
        tl.store(Stats + 4 * stat_stride + o_row, tl.where(has, b_ls * b_ls / b_q2s, 0.0), mask=m_m)


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


def forward_config(dtype: torch.dtype, block_d: int) -> dict[str, int]:
    """Tile sizes and launch options of the forward (one fixed config per dtype and head dim)."""
    if interpreting():
        return {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}
    if dtype == torch.float32:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    if block_d <= 128:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}


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
) -> tuple[torch.Tensor, torch.Tensor, RowStats | None]:
    """Response-stage attention forward with optional fused T1 row statistics.

    Args:
        q: [B, Hq, R, D] bf16/fp16/fp8-e5m2/fp32. Queries of the last ``R`` positions; any strides.
        k: [B, Hkv, L, D] same dtype. Keys; ``Hq % Hkv == 0``; any strides.
        v: [B, Hkv, L, D] same dtype. Values; any strides.
        key_mask: [B, L] bool or None. True marks a real key.
        prompt_len: [B] int64 on the device of ``q``. Keys ``j < prompt_len[b]`` are prompt keys.
        scale: score scale (``1/sqrt(D)`` for standard attention).
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window ``w`` (key ``j`` visible from position ``p`` iff ``p - w < j``), or None.
        rows: whether to compute the T1 row statistics.

    Returns:
        ``(out, lse, row_stats)``: out [B, Hq, R, D] in q's dtype; lse [B, Hq, R] float32 natural log
        (``-inf`` on rows that see no key); :class:`RowStats` of [B, Hq, R] float32 tensors, or None when
        ``rows`` is False.

    Shape:
        q: [B, Hq, R, D]; k, v: [B, Hkv, L, D]; out: [B, Hq, R, D]; lse: [B, Hq, R].
    """
    g = launch_geometry(q, k, key_mask, softcap, window)
    out = torch.empty(g.B, g.Hq, g.R, g.D, dtype=q.dtype, device=q.device)
    lse = torch.empty(g.B, g.Hq, g.R, dtype=torch.float32, device=q.device)
    stats = torch.empty(5 if rows else 1, g.B, g.Hq, g.R, dtype=torch.float32, device=q.device)
    if out.numel() > 0:
        cfg = forward_config(q.dtype, g.block_d)
        grid = (triton.cdiv(g.R, cfg["BLOCK_M"]), g.B * g.Hq)
        _fwd_kernel[grid](
            q, k, v, out, lse, stats, g.key_mask, prompt_len.contiguous(),
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), g.mask_stride,
            g.Hq, g.R, g.L, g.D, float(scale), g.softcap, g.window, g.B * g.Hq * g.R,
            GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
            ROWS=rows, MMA=g.mma, WHILE=interpreting(), BLOCK_D=g.block_d, **cfg,
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
