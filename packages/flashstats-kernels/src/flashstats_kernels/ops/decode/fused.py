"""Split-K decoding kernels (flash-decoding) with T1, T2 and running T3 statistics.

Three launches per step, all with grids fixed by the tensor shapes (``kv_len`` is read on the device,
so a step can be captured in a CUDA graph and replayed as the cache grows):

1. ``_split_kernel``: one program per (key split, batch x KV head, row block). The rows of a program
   are the ``G x R`` query rows (``G`` query heads of one KV head, ``R`` new rows) that read the same
   keys; it streams the key tiles of its split with the forward's tile step and writes its partial
   state: running max ``m``, ``l``, the entropy, squared-weight and prompt-mass accumulators, the
   visible-key count and the unnormalised output.
2. ``_merge_kernel``: one program per (batch x KV head, row block) merges the partial states, a chunk
   of up to 16 splits at a time in a fixed reduction tree, with the package's merge rule
   (``state.merge_states``; here in log2 units with the entropy accumulator shifted by ``m``, as in
   the forward kernel), finalises output, LSE and T1, and reads the T2 lookups off the merged LSE.
   The order is fixed, so results are bitwise identical across runs; the split count changes them
   only by fp32 rounding.
3. ``_columns_kernel`` (T3 only): the split kernel also stores the scores of every (row, visible
   key) it computed, in log2 units, into a ``[B, Hq, R, Lc]`` float32 scratch; one program per (key
   block, batch x query head) turns them into weights with the merged LSE and adds them (and, for
   head 0, the row counts) to the running column state. No key is read twice: the pass reads 4 bytes
   per score instead of re-scoring the rows against the keys (``2 D`` bytes per key and KV head).
   Each program owns its slots and runs the rows in a fixed order: no atomics.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import torch
import triton
import triton.language as tl

from flashstats_kernels._problem import fold_scale_sign
from flashstats_kernels.ops._fused import (
    fwd_range,
    interpreting,
    launch_geometry,
    load_tile,
    lookup,
    mma_cast,
)
from flashstats_kernels.state import ColumnState, RowTargets
from flashstats_kernels.types import AttentionResult, LookupStats, RowStats

_LN2 = tl.constexpr(0.6931471805599453)
_N_STATE = 6  # m, l, a, q2, pm, n


@triton.jit
def _rows(i_rb, R, kv_len, GROUP: tl.constexpr, BLOCK_M: tl.constexpr):
    """Rows of a program: query head offset in the group, row index, validity and cache position."""
    o_m = i_rb * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM] index into the G x R rows of one KV head
    m_m = o_m < GROUP * R
    o_g = o_m // R  # [BM] query head within the group
    o_r = o_m % R  # [BM] new row
    return o_m, m_m, o_g, o_r, kv_len - R + o_r


@triton.jit(do_not_specialize=["R", "window", "splits"])
def _split_kernel(
    Q, K, V, Part, Acc, Scores, KeyMask, PromptLen, KvLen,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, smb, ssr,
    Hq, Hkv, R, scale, softcap, window, splits,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, SCORES: tl.constexpr,
    MMA: tl.constexpr, WHILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    i_s = tl.program_id(0)
    i_bk = tl.program_id(1).to(tl.int64)  # batch x KV head
    i_rb = tl.program_id(2)
    n_rb = tl.num_programs(2)
    i_b = i_bk // Hkv
    i_kh = i_bk % Hkv
    kv_len = tl.load(KvLen)
    o_m, m_m, o_g, o_r, pos_q = _rows(i_rb, R, kv_len, GROUP, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)  # [BD]
    m_d = o_d < D
    EVEN_D: tl.constexpr = D == BLOCK_D
    p_q = Q + i_b * sqb + (i_kh * GROUP + o_g)[:, None] * sqh + o_r[:, None] * sqm + o_d[None, :] * sqd
    b_q = mma_cast(load_tile(p_q, m_m, m_d, True, not EVEN_D), MMA)  # [BM, BD]
    p_k0 = K + i_b * skb + i_kh * skh
    p_v0 = V + i_b * svb + i_kh * svh
    plen = tl.load(PromptLen + i_b)
    # keys any row can see: [lo, kv_len), cut into `splits` ranges of whole tiles
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(kv_len - R - window + 1, 0) // BLOCK_N * BLOCK_N
    per = tl.cdiv(tl.cdiv(kv_len - lo, splits), BLOCK_N) * BLOCK_N
    start = lo + i_s * per
    stop = tl.minimum(start + per, kv_len)
    st = (
        tl.full([BLOCK_M], -1.0e30, tl.float32), tl.zeros([BLOCK_M], tl.float32),
        tl.zeros([BLOCK_M, BLOCK_D], tl.float32), tl.zeros([BLOCK_M], tl.float32),
        tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.int32),
    )  # fmt: skip
    p_sc = Scores + (i_bk * GROUP * R + o_m) * ssr  # [BM] score rows [B, Hq, R, Lc] of the program's rows
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = fwd_range(
        start, stop, b_q, pos_q, p_k0, p_v0, KeyMask + i_b * smb, plen, kv_len, skn, skd, svn, svd, o_d, m_d,
        scale * 1.4426950408889634, scale, softcap, window, *st,
        True, 2, True, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE, BLOCK_N, False,
        SCORES, p_sc, m_m,
    )  # fmt: skip
    o_p = ((i_bk * n_rb + i_rb) * splits + i_s) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM] slot of the state
    n_slot = tl.num_programs(1) * n_rb * splits * BLOCK_M  # slots per state field
    tl.store(Part + o_p, b_mx)
    tl.store(Part + n_slot + o_p, b_l)
    tl.store(Part + 2 * n_slot + o_p, b_a)
    tl.store(Part + 3 * n_slot + o_p, b_q2)
    tl.store(Part + 4 * n_slot + o_p, b_pm)
    tl.store(Part + 5 * n_slot + o_p, b_n.to(tl.float32))
    tl.store(Acc + o_p[:, None] * BLOCK_D + o_d[None, :], b_acc)


@triton.jit
def _merge_chunk(st, Part, Acc, n_slot, base, i_s, splits, o_d, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                 SPLIT_BLOCK: tl.constexpr):  # fmt: skip
    """Merge the partial states of splits ``i_s .. i_s + SPLIT_BLOCK`` (those below ``splits``) into ``st``.

    The merge rule in log2 units with the entropy accumulator shifted by ``m``, applied to the running
    state and the whole chunk at once: one shared maximum, then weighted sums over the chunk (a fixed
    reduction tree, so bitwise identical across runs). Slots past ``splits`` load as empty states.
    """
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = st
    o_s = i_s + tl.arange(0, SPLIT_BLOCK)  # [SB]
    m_s = (o_s < splits)[:, None]  # [SB, 1]
    o_p = o_s[:, None] * BLOCK_M + base[None, :]  # [SB, BM] slots
    s_mx = tl.load(Part + o_p, mask=m_s, other=-1.0e30)
    s_l = tl.load(Part + n_slot + o_p, mask=m_s, other=0.0)
    s_a = tl.load(Part + 2 * n_slot + o_p, mask=m_s, other=0.0)
    s_q2 = tl.load(Part + 3 * n_slot + o_p, mask=m_s, other=0.0)
    s_pm = tl.load(Part + 4 * n_slot + o_p, mask=m_s, other=0.0)
    s_n = tl.load(Part + 5 * n_slot + o_p, mask=m_s, other=0.0)
    s_acc = tl.load(Acc + o_p[:, :, None] * BLOCK_D + o_d[None, None, :], mask=m_s[:, :, None], other=0.0)
    mx = tl.maximum(b_mx, tl.max(s_mx, 0))  # [BM]
    fx = tl.exp2(b_mx - mx)  # every factor lies in [0, 1]
    fy = tl.exp2(s_mx - mx[None, :])  # [SB, BM]
    b_a = fx * (b_a + b_l * (b_mx - mx)) + tl.sum(fy * (s_a + s_l * (s_mx - mx[None, :])), 0)
    b_l = fx * b_l + tl.sum(fy * s_l, 0)
    b_q2 = fx * fx * b_q2 + tl.sum(fy * fy * s_q2, 0)
    b_pm = fx * b_pm + tl.sum(fy * s_pm, 0)
    b_acc = fx[:, None] * b_acc + tl.sum(fy[:, :, None] * s_acc, 0)
    return mx, b_l, b_acc, b_a, b_q2, b_pm, b_n + tl.sum(s_n, 0)


@triton.jit(do_not_specialize=["R", "window", "S", "splits"])
def _merge_kernel(
    Q, K, Part, Acc, Out, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, KvLen, Start,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, sob, soh, som, sod, smb, spb,
    stf, stb, sth, sta, sdb, sdh, sda, svb, svh, sva, ssb, ssh, ssa, sss,
    Hq, Hkv, R, S, scale, softcap, window, log_eps, splits,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, LOOKUPS: tl.constexpr,
    HAS_START: tl.constexpr, WHILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
):  # fmt: skip
    i_bk = tl.program_id(0).to(tl.int64)
    i_rb = tl.program_id(1)
    n_rb = tl.num_programs(1)
    i_b = i_bk // Hkv
    i_kh = i_bk % Hkv
    kv_len = tl.load(KvLen)
    o_m, m_m, o_g, o_r, pos_q = _rows(i_rb, R, kv_len, GROUP, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < D
    n_slot = tl.num_programs(0) * n_rb * splits * BLOCK_M
    base = (i_bk * n_rb + i_rb) * splits * BLOCK_M + tl.arange(0, BLOCK_M)
    b_mx = tl.full([BLOCK_M], -1.0e30, tl.float32)
    b_l = tl.zeros([BLOCK_M], tl.float32)
    b_a = tl.zeros([BLOCK_M], tl.float32)
    b_q2 = tl.zeros([BLOCK_M], tl.float32)
    b_pm = tl.zeros([BLOCK_M], tl.float32)
    b_n = tl.zeros([BLOCK_M], tl.float32)
    b_acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # the fixed reduction order, SPLIT_BLOCK splits at a time (a serial loop over single splits was
    # latency-bound: 19 us per layer for 64 splits at 32K keys on the H200); the split count is a
    # runtime value, so a cache that grows (which changes the default count) never recompiles
    i_s = 0
    while i_s < splits:
        b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _merge_chunk(
            (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n), Part, Acc, n_slot, base, i_s, splits, o_d,
            BLOCK_M, BLOCK_D, SPLIT_BLOCK,
        )  # fmt: skip
        i_s += SPLIT_BLOCK

    i_h = i_kh * GROUP + o_g  # [BM] query head
    has = b_l > 0.0
    b_ls = tl.where(has, b_l, 1.0)
    b_nan = tl.where(b_l != b_l, float("nan"), 0.0)  # a NaN/+inf visible score: a NaN row (SEMANTICS.md)
    p_o = Out + i_b * sob + i_h[:, None] * soh + o_r[:, None] * som + o_d[None, :] * sod
    b_o = b_acc / b_ls[:, None] + b_nan[:, None]
    tl.store(p_o, b_o.to(Out.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])
    o_row = (i_b * Hq + i_h) * R + o_r  # [BM] offsets into [B, Hq, R]
    b_lse2 = tl.where(has, b_mx + tl.log2(b_ls), float("-inf")) + b_nan
    tl.store(Lse + o_row, b_lse2 * _LN2, mask=m_m)
    o_a = o_r.to(tl.int64)  # [BM] slot of each row in the per-row outputs (RowTargets)
    if HAS_START:
        o_a += tl.load(Start)
    if ROWS:
        p_t = Stats + i_b * stb + i_h * sth + o_a * sta  # [BM]
        b_ent = tl.where(has, tl.log(b_ls) - b_a / b_ls * _LN2, 0.0) + b_nan
        tl.store(p_t, b_ent, mask=m_m)
        b_nf = tl.maximum(b_n, 2.0)
        b_norm = tl.where(b_n > 1.0, b_ent / tl.log(b_nf), 0.0) + b_nan
        tl.store(p_t + stf, b_norm, mask=m_m)
        tl.store(p_t + 2 * stf, b_pm / b_ls + b_nan, mask=m_m)
        tl.store(p_t + 3 * stf, tl.where(has, 1.0 / b_ls, 0.0) + b_nan, mask=m_m)
        b_q2s = tl.where(has, b_q2, 1.0)
        tl.store(p_t + 4 * stf, tl.where(has, b_ls * b_ls / b_q2s, 0.0) + b_nan, mask=m_m)
    if LOOKUPS:
        p_q = Q + i_b * sqb + i_h[:, None] * sqh + o_r[:, None] * sqm + o_d[None, :] * sqd
        b_q = tl.load(p_q, mask=m_m[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        p_k0 = K + i_b * skb + i_kh * skh
        p_km = KeyMask + i_b * smb
        plen = tl.load(PromptLen + i_b)
        args = (kv_len, skn, skd, o_d, m_d, scale, softcap, window)
        b_d = lookup(b_q, p_k0, p_km, pos_q, pos_q, m_m, b_lse2, *args, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW)
        tl.store(Diag + i_b * sdb + i_h * sdh + o_a * sda, tl.maximum(b_d * _LN2, log_eps), mask=m_m)
        b_pv = lookup(
            b_q, p_k0, p_km, pos_q - 1, pos_q, m_m & (pos_q > plen), b_lse2, *args,
            HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
        )  # fmt: skip
        tl.store(Prev + i_b * svb + i_h * svh + o_a * sva, tl.exp2(b_pv), mask=m_m)
        p_sk = Sinks + i_b * ssb + i_h * ssh + o_a * ssa  # [BM]
        i_s = 0
        while i_s < S:
            pos_k = tl.zeros_like(pos_q) + tl.load(SinkPos + i_b * spb + i_s)
            b_w = lookup(b_q, p_k0, p_km, pos_k, pos_q, m_m, b_lse2, *args, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW)
            tl.store(p_sk + i_s * sss, tl.exp2(b_w), mask=m_m)
            i_s += 1


@triton.jit(do_not_specialize=["R", "window"])
def _columns_kernel(
    Scores, Lse, Sum, Count, KeyMask, PromptLen, KvLen,
    ssr, smb, scb, sch, scn, sntb, sntn, Hq, R, window,
    HAS_MASK: tl.constexpr, HAS_WINDOW: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Add the weights of the ``R`` new rows of one query head to the column sums of a key block.

    The scores are the split kernel's (log2 units); only (row, key) pairs that the row sees and that
    count for T3 are read, so slots the split kernel did not write are never touched.
    """
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1).to(tl.int64)  # batch x query head
    i_b = i_bh // Hq
    i_h = i_bh % Hq
    kv_len = tl.load(KvLen)
    if i_n * BLOCK_N < kv_len:
        o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
        m_n = o_n < kv_len
        p_km = KeyMask + i_b * smb
        keep_k = m_n
        if HAS_MASK:
            keep_k = keep_k & (tl.load(p_km + o_n, mask=m_n, other=0) != 0)
        plen = tl.load(PromptLen + i_b)
        b_sum = tl.zeros([BLOCK_N], tl.float32)
        b_cnt = tl.zeros([BLOCK_N], tl.float32)
        i_r = 0
        while i_r < R:  # the rows in a fixed order
            pos_q = kv_len - R + i_r
            b_lse2 = tl.load(Lse + i_bh * R + i_r) * 1.4426950408889634
            counted = (pos_q >= plen) & (b_lse2 != float("-inf"))  # a NaN row counts (and gives NaN)
            if HAS_MASK:
                counted = counted & (tl.load(p_km + pos_q) != 0)
            vis = keep_k & (o_n <= pos_q) & counted  # [BN]
            if HAS_WINDOW:
                vis = vis & (o_n > pos_q - window)
            b_s = tl.load(Scores + (i_bh * R + i_r) * ssr + o_n, mask=vis, other=float("-inf"))
            b_sum += tl.where(vis, tl.exp2(b_s - b_lse2), 0.0)
            b_cnt += vis.to(tl.float32)
            i_r += 1
        p_sum = Sum + i_b * scb + i_h * sch + o_n * scn
        tl.store(p_sum, tl.load(p_sum, mask=m_n, other=0.0) + b_sum, mask=m_n)
        if i_h == 0:  # counts do not depend on the head: head 0's program of each key block adds them
            p_cnt = Count + i_b * sntb + o_n * sntn
            tl.store(p_cnt, tl.load(p_cnt, mask=m_n, other=0.0) + b_cnt, mask=m_n)


def decode_config(block_d: int, group_rows: int) -> dict[str, int]:
    """Tile sizes of the three decoding kernels: rows per program, keys per tile, warps."""
    block_m = max(16, min(64, triton.next_power_of_2(group_rows)))
    if interpreting():
        return {"BLOCK_M": block_m, "BLOCK_N": 16, "COL_N": 16, "num_warps": 4}
    block_n = 32 if block_d > 128 else 64
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "COL_N": 512, "num_warps": 4}


def merge_split_block(splits: int, block_m: int, block_d: int) -> int:
    """Splits the merge kernel reads at once: a power of two up to 16 and no more than ``splits`` needs.

    Its ``[SB, BM, BD]`` chunk of partial outputs stays within 16K fp32 values (128 per thread of the
    kernel's 4 warps).
    """
    fit = max(1, (1 << 14) // (block_m * block_d))
    return max(1, min(16, 1 << (fit.bit_length() - 1), triton.next_power_of_2(splits)))


def default_splits(batch_kv: int, row_blocks: int, cache: int, block_n: int) -> int:
    """Key splits that give about two programs per SM of an H100/H200, from the cache capacity alone.

    The choice depends only on shapes (never on ``kv_len``), so a captured step keeps its grid.
    """
    want = -(-264 // max(1, batch_kv * row_blocks))
    return max(1, min(want, 64, -(-cache // (4 * block_n))))


SCORE_ELEMENTS = 1 << 25
"""Scratch scores of one launch with T3 (``B * Hq * R * Lc`` float32, 128 MiB): a call with more rows
runs in row chunks (one row at least, a scratch as large as the column state itself)."""


def _cat_rows(items: list) -> object:
    """Dataclasses of per-row tensors (`RowStats`, `LookupStats`) concatenated on the row axis."""
    names = [f.name for f in dataclasses.fields(items[0])]
    return type(items[0])(*(torch.cat([getattr(x, n) for x in items], 2) for n in names))


def decode_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv_len: torch.Tensor,
    columns: ColumnState | None,
    targets: RowTargets | None = None,
    **options: Any,
) -> AttentionResult:
    """One decoding step, split-K over the cache (arguments of [`flashstats_kernels.decode_attention`][]).

    With T3, a call whose scratch scores would exceed `SCORE_ELEMENTS` runs in row chunks, in order,
    each against the keys its rows see (exact: rows do not interact, and the column state is added
    to chunk after chunk). Arguments and result as `_decode_launch`.
    """
    b, hq, r = q.shape[0], q.shape[1], q.shape[2]
    per = max(1, SCORE_ELEMENTS // max(1, b * hq * k.shape[2])) if columns is not None else r
    if r <= per:
        return _decode_launch(q, k, v, kv_len=kv_len, columns=columns, targets=targets, **options)
    parts = [
        _decode_launch(
            q[:, :, i : i + per], k, v, kv_len=kv_len - (r - min(i + per, r)), columns=columns,
            targets=None if targets is None else dataclasses.replace(targets, start=targets.start + i),
            **options,
        )
        for i in range(0, r, per)
    ]  # fmt: skip
    res = AttentionResult(out=torch.cat([p.out for p in parts], 2), lse=torch.cat([p.lse for p in parts], 2))
    if parts[0].rows is not None:
        res.rows = cast(RowStats, _cat_rows([p.rows for p in parts]))
    if parts[0].lookups is not None:
        res.lookups = cast(LookupStats, _cat_rows([p.lookups for p in parts]))
    return res


def _decode_launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv_len: torch.Tensor,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    rows: bool,
    sink_positions: torch.Tensor | None,
    diag_eps: float,
    columns: ColumnState | None,
    splits: int | None = None,
    targets: RowTargets | None = None,
) -> AttentionResult:
    """The three launches of one decoding call (split, merge, columns) for all of its rows.

    Args:
        q: [B, Hq, R, D]. the new rows; any strides.
        k: [B, Hkv, Lc, D]. key cache; any strides.
        v: [B, Hkv, Lc, D]. value cache.
        kv_len: [1] integer tensor on q's device. valid keys; the rows sit at ``kv_len - R + i``.
        key_mask: [B, Lc] bool or None.
        prompt_len: [B] int64 on q's device.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        rows: compute T1.
        sink_positions: [B, S] int64 (compute T2) or None (skip T2).
        diag_eps: clamp of ``diag_log``.
        columns: running column state ``[B, Hq, Lc]`` updated in place, or None (skip T3).
        splits: key splits (None: `default_splits`).
        targets: write T1 and T2 into these slots instead of new tensors (see `RowTargets`).

    Returns:
        AttentionResult with out [B, Hq, R, D], lse [B, Hq, R], rows and lookups as asked (None when
        written into ``targets``).
    """
    q, scale = fold_scale_sign(q, scale)
    g = launch_geometry(q, k, key_mask, softcap, window)
    cfg = decode_config(g.block_d, g.group * g.R)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    n_rb = triton.cdiv(g.group * g.R, bm)
    bkv = g.B * (g.Hq // g.group)
    n_split = splits if splits is not None else default_splits(bkv, n_rb, g.L, bn)
    dev = q.device
    part = torch.empty(_N_STATE, bkv * n_rb * n_split * bm, dtype=torch.float32, device=dev)
    acc = torch.empty(bkv * n_rb * n_split * bm, g.block_d, dtype=torch.float32, device=dev)
    out = torch.empty(g.B, g.Hq, g.R, g.D, dtype=q.dtype, device=dev)
    lse = torch.empty(g.B, g.Hq, g.R, dtype=torch.float32, device=dev)
    n_sinks = 0 if sink_positions is None else sink_positions.shape[1]
    stats, diag, prev, sinks, start = _row_outputs(g.B, g.Hq, g.R, n_sinks, rows, targets, lse)
    pos = diag if sink_positions is None else sink_positions.to(dev, torch.int64).contiguous()
    plen = prompt_len.contiguous()
    kvl = kv_len.reshape(1)
    # the split kernel's scores for the running columns (slots it does not write are never read)
    scores = torch.empty(g.B * g.Hq * g.R if columns is not None else 1, g.L, dtype=torch.float32, device=dev)
    flags = dict(
        D=g.D, GROUP=g.group, HAS_MASK=g.has_mask, HAS_SOFTCAP=g.has_softcap, HAS_WINDOW=g.has_window,
        WHILE=interpreting(), BLOCK_D=g.block_d, num_warps=cfg["num_warps"],
    )  # fmt: skip
    _split_kernel[(n_split, bkv, n_rb)](
        q, k, v, part, acc, scores, g.key_mask, plen, kvl,
        *q.stride(), *k.stride(), *v.stride(), g.mask_stride, scores.stride(0),
        g.Hq, g.Hq // g.group, g.R, float(scale), g.softcap, g.window, n_split,
        ROWS=rows, SCORES=columns is not None, MMA=g.mma, BLOCK_M=bm, BLOCK_N=bn, **flags,
    )  # fmt: skip
    _merge_kernel[(bkv, n_rb)](
        q, k, part, acc, out, lse, stats, diag, prev, sinks, pos, g.key_mask, plen, kvl, start,
        *q.stride(), *k.stride(), *out.stride(), g.mask_stride, pos.stride(0),
        *stats.stride(), *diag.stride(), *prev.stride(), *sinks.stride(),
        g.Hq, g.Hq // g.group, g.R, n_sinks, float(scale), g.softcap, g.window, math.log(diag_eps),
        n_split, ROWS=rows, LOOKUPS=sink_positions is not None, HAS_START=targets is not None, BLOCK_M=bm,
        SPLIT_BLOCK=merge_split_block(n_split, bm, g.block_d), **flags,
    )  # fmt: skip
    if columns is not None:
        _columns_kernel[(triton.cdiv(g.L, cfg["COL_N"]), g.B * g.Hq)](
            scores, lse, columns.sum, columns.count, g.key_mask, plen, kvl,
            scores.stride(0), g.mask_stride, *columns.sum.stride(), *columns.count.stride(), g.Hq, g.R,
            g.window, HAS_MASK=g.has_mask, HAS_WINDOW=g.has_window, BLOCK_N=cfg["COL_N"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    result = AttentionResult(out=out, lse=lse)
    if rows and targets is None:
        result.rows = RowStats(*stats.unbind(0))
    if sink_positions is not None and targets is None:
        result.lookups = LookupStats(diag_log=diag, prev_weight=prev, sink_weights=sinks[..., :n_sinks])
    return result


def _row_outputs(
    b: int, hq: int, r: int, n_sinks: int, rows: bool, targets: RowTargets | None, lse: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """``(stats, diag, prev, sinks, start)``: the buffers the merge kernel writes the per-row outputs to.

    New ``[.., B, Hq, R, ..]`` tensors, or the caller's targets (a dummy for the unused ones; ``start``
    is a dummy without targets).
    """
    dev = lse.device
    if targets is None:
        stats = torch.empty(5 if rows else 1, b, hq, r, dtype=torch.float32, device=dev)
        diag = torch.empty(b, hq, r, dtype=torch.float32, device=dev)
        sinks = torch.empty(b, hq, r, max(n_sinks, 1), dtype=torch.float32, device=dev)
        return stats, diag, torch.empty_like(diag), sinks, lse
    dummy = lse.new_empty(1, 1, 1, 1)
    stats = targets.rows if targets.rows is not None else dummy
    diag = targets.diag_log if targets.diag_log is not None else dummy[0]
    prev = targets.prev_weight if targets.prev_weight is not None else dummy[0]
    sinks = targets.sink_weights if targets.sink_weights is not None else dummy
    return stats, diag, prev, sinks, targets.start


__all__ = ["SCORE_ELEMENTS", "decode_triton", "default_splits", "merge_split_block"]
