"""Exponentials on the FMA pipes (FlashAttention-4's split), for T3's switch ``FLASHSTATS_T3_SPLIT_EXP``.

Measured slower than the special-function unit on the H200 at every share (a side-by-side run of 2026-12-02),
so T3 runs without them by default.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def exp2_fma(x):
    """``2^x`` for ``x <= 0`` on the FMA pipes instead of the special-function unit (as FlashAttention-4).

    ``x = n + f`` with ``n`` the nearest integer, found by adding and subtracting ``1.5 * 2^23`` (the sum
    holds ``n`` in its low mantissa bits: no rounding instruction); a degree-5 polynomial gives ``2^f``
    on ``[-0.5, 0.5]`` (fit to 7.5e-8 relative, within 4 ulp of fp32 after rounding), and ``n`` is added
    to the exponent bits. Below ``-126`` (weights under 1.2e-38, and ``-inf``) the result is 0, as the
    flush-to-zero hardware exponential gives; NaN stays NaN.
    """
    x = tl.maximum(x, -127.0, propagate_nan=tl.PropagateNan.ALL)
    t = x + 12582912.0  # 1.5 * 2^23: t's low mantissa bits hold n = round(x) (|n| < 2^22)
    f = x - (t - 12582912.0)  # [-0.5, 0.5]
    p = 0.001327647205978305 * f + 0.009675541397064169
    p = p * f + 0.055507132738345843
    p = p * f + 0.24022119722686588
    p = p * f + 0.6931469670642145
    p = p * f + 1.0000000716549162
    # (0x4B400000 + n) << 23 wraps to n << 23 in 32 bits: n added to p's exponent field
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    y = tl.where(x < -126.0, 0.0, bits.to(tl.float32, bitcast=True))
    return tl.where(x == x, y, x)  # NaN: the exponent arithmetic above can turn its bits finite


@triton.jit
def _halves(x, BN: tl.constexpr, BM: tl.constexpr):
    """The two column halves ``x[:, :BM // 2]``, ``x[:, BM // 2:]`` of a ``[BN, BM]`` tile (in registers)."""
    return tl.split(tl.permute(tl.reshape(x, [BN, 2, BM // 2]), [0, 2, 1]))


@triton.jit
def exp2_row_sums(b_u, BN: tl.constexpr, BM: tl.constexpr, FMA_PARTS: tl.constexpr):
    """``sum_j 2^u[:, j]`` of a ``[BN, BM]`` tile, the last ``1 / FMA_PARTS`` of its columns on `exp2_fma`.

    ``FMA_PARTS``: 0 (every exponential on the special-function unit), 2, 4 or 8.
    """
    if FMA_PARTS == 0:
        return tl.sum(tl.exp2(b_u), 1)
    lo, hi = _halves(b_u, BN, BM)
    if FMA_PARTS == 2:
        return tl.sum(tl.exp2(lo), 1) + tl.sum(exp2_fma(hi), 1)
    hi_lo, hi_hi = _halves(hi, BN, BM // 2)
    if FMA_PARTS == 4:
        return tl.sum(tl.exp2(lo), 1) + tl.sum(tl.exp2(hi_lo), 1) + tl.sum(exp2_fma(hi_hi), 1)
    last_lo, last_hi = _halves(hi_hi, BN, BM // 4)
    mufu = tl.sum(tl.exp2(lo), 1) + tl.sum(tl.exp2(hi_lo), 1) + tl.sum(tl.exp2(last_lo), 1)
    return mufu + tl.sum(exp2_fma(last_hi), 1)
