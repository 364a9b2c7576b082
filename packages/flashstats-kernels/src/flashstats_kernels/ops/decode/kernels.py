"""Device code of the split-K decoding op: the split, merge and running-columns kernels.

What each kernel does, and how a call launches them, is described in `fused`, the host side.
"""

from __future__ import annotations

import triton
import triton.language as tl

from flashstats_kernels.ops._fused import (
    fwd_inner,
    fwd_range,
    lazy_rows,
    lazy_zeros,
    load_tile,
    lookup,
    mma_cast,
)

_LN2 = tl.constexpr(0.6931471805599453)
N_STATE = 6  # fields of a partial state: m, l, a, q2, pm, n


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
    BLOCK_D: tl.constexpr, LAZY: tl.constexpr,
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
    b_a0 = tl.zeros([BLOCK_M], tl.float32)
    b_q20 = tl.zeros([BLOCK_M], tl.float32)
    if LAZY:  # the entropy and squared-weight sums per score, summed over keys once at the end
        b_a0, b_q20 = lazy_zeros(BLOCK_M, BLOCK_N)
    st = (
        tl.full([BLOCK_M], -1.0e30, tl.float32), tl.zeros([BLOCK_M], tl.float32),
        tl.zeros([BLOCK_M, BLOCK_D], tl.float32), b_a0, b_q20, tl.zeros([BLOCK_M], tl.float32),
        tl.zeros([BLOCK_M], tl.int32),
    )  # fmt: skip
    p_sc = Scores + (i_bk * GROUP * R + o_m) * ssr  # [BM] score rows [B, Hq, R, Lc] of the program's rows
    args = (
        b_q, pos_q, p_k0, p_v0, KeyMask + i_b * smb, plen, kv_len, skn, skd, svn, svd, o_d, m_d,
        scale * 1.4426950408889634, scale, softcap, window,
    )  # fmt: skip
    if HAS_MASK:  # every tile tests visibility and counts the visible keys
        st = fwd_range(
            start, stop, *args, *st, True, 2, True, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA,
            WHILE, BLOCK_N, False, SCORES, p_sc, m_m, LAZY,
        )  # fmt: skip
    else:  # only the window's lower edge and the rows' own tiles are masked (the merge knows n)
        mid = (kv_len - R + 1) // BLOCK_N * BLOCK_N  # keys below it are at or before every row
        inner = lo
        if HAS_WINDOW:  # first key tile inside every row's window
            edge = tl.maximum(kv_len - window, 0)
            inner = tl.minimum(tl.maximum((edge + BLOCK_N - 1) // BLOCK_N * BLOCK_N, lo), mid)
        a1 = tl.minimum(tl.maximum(inner, start), stop)  # [start, a1) masked, [a1, a2) interior
        a2 = tl.minimum(tl.maximum(mid, start), stop)  # [a2, stop) masked
        st = fwd_range(
            start, a1, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA,
            WHILE, BLOCK_N, False, SCORES, p_sc, m_m, LAZY,
        )  # fmt: skip
        st = fwd_inner(
            a1, a2, *args, *st, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE, BLOCK_N, False,
            SCORES, p_sc, m_m, LAZY,
        )  # fmt: skip
        st = fwd_range(
            a2, stop, *args, *st, True, 2, False, EVEN_D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, MMA, WHILE,
            BLOCK_N, False, SCORES, p_sc, m_m, LAZY,
        )  # fmt: skip
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = st
    if LAZY:
        b_a, b_q2 = lazy_rows(b_a, b_q2)
    o_p = ((i_bk * n_rb + i_rb) * splits + i_s) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM] slot of the state
    n_slot = tl.num_programs(1) * n_rb * splits * BLOCK_M  # slots per state field
    tl.store(Part + o_p, b_mx)
    tl.store(Part + n_slot + o_p, b_l)
    tl.store(Part + 2 * n_slot + o_p, b_a)
    tl.store(Part + 3 * n_slot + o_p, b_q2)
    tl.store(Part + 4 * n_slot + o_p, b_pm)
    tl.store(Part + 5 * n_slot + o_p, b_n.to(tl.float32))
    tl.store(Acc + o_p[:, None] * BLOCK_D + o_d[None, :], b_acc, mask=m_m[:, None])  # padded rows: never read


@triton.jit
def _merge_chunk(st, Part, Acc, n_slot, base, i_s, splits, m_m, o_d, m_d, BLOCK_M: tl.constexpr,
                 BLOCK_D: tl.constexpr, SPLIT_BLOCK: tl.constexpr):  # fmt: skip
    """Merge the partial states of splits ``i_s .. i_s + SPLIT_BLOCK`` (those below ``splits``) into ``st``.

    The merge rule in log2 units with the entropy accumulator shifted by ``m``, applied to the running
    state and the whole chunk at once: one shared maximum, then weighted sums over the chunk (a fixed
    reduction tree, so bitwise identical across runs). Slots past ``splits`` load as empty states;
    only the program's valid rows (``m_m``) and output columns ``o_d`` are read.
    """
    b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = st
    o_s = i_s + tl.arange(0, SPLIT_BLOCK)  # [SB]
    m_s = (o_s < splits)[:, None] & m_m[None, :]  # [SB, MM]
    o_p = o_s[:, None] * BLOCK_M + base[None, :]  # [SB, MM] slots
    s_mx = tl.load(Part + o_p, mask=m_s, other=-1.0e30)
    s_l = tl.load(Part + n_slot + o_p, mask=m_s, other=0.0)
    s_a = tl.load(Part + 2 * n_slot + o_p, mask=m_s, other=0.0)
    s_q2 = tl.load(Part + 3 * n_slot + o_p, mask=m_s, other=0.0)
    s_pm = tl.load(Part + 4 * n_slot + o_p, mask=m_s, other=0.0)
    s_n = tl.load(Part + 5 * n_slot + o_p, mask=m_s, other=0.0)
    m_acc = m_s[:, :, None] & m_d[None, None, :]  # [SB, MM, MD]
    s_acc = tl.load(Acc + o_p[:, :, None] * BLOCK_D + o_d[None, None, :], mask=m_acc, other=0.0)
    mx = tl.maximum(b_mx, tl.max(s_mx, 0))  # [MM]
    fx = tl.exp2(b_mx - mx)  # every factor lies in [0, 1]
    fy = tl.exp2(s_mx - mx[None, :])  # [SB, MM]
    b_a = fx * (b_a + b_l * (b_mx - mx)) + tl.sum(fy * (s_a + s_l * (s_mx - mx[None, :])), 0)
    b_l = fx * b_l + tl.sum(fy * s_l, 0)
    b_q2 = fx * fx * b_q2 + tl.sum(fy * fy * s_q2, 0)
    b_pm = fx * b_pm + tl.sum(fy * s_pm, 0)
    b_acc = fx[:, None] * b_acc + tl.sum(fy[:, :, None] * s_acc, 0)
    return mx, b_l, b_acc, b_a, b_q2, b_pm, b_n + tl.sum(s_n, 0)


@triton.jit
def _merge_program(
    i_bk, i_mb, i_db, n_bkv, n_db,
    Q, K, Part, Acc, Out, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, KvLen, Start,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, sob, soh, som, sod, smb, spb,
    stf, stb, sth, sta, sdb, sdh, sda, svb, svh, sva, ssb, ssh, ssa, sss,
    Hq, Hkv, R, S, scale, softcap, window, log_eps, splits,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, LOOKUPS: tl.constexpr,
    HAS_START: tl.constexpr, WHILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    MERGE_M: tl.constexpr, MERGE_D: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
):  # fmt: skip
    """The merge of one program: KV head ``i_bk``, row block ``i_mb``, output column block ``i_db``.

    ``MERGE_M`` rows and ``MERGE_D`` output columns, of ``n_bkv`` (batch x KV heads) and ``n_db`` column
    blocks.

    ``MERGE_M`` divides the split kernel's ``BLOCK_M``, so a program's rows lie in one row block of the
    partial states. Every program merges the scalar states of its rows and its columns of the output;
    the per-row work (LSE and T1, each T2 lookup) is dealt over the column blocks (`_finish_rows`).
    """
    n_rb = tl.cdiv(GROUP * R, BLOCK_M)  # row blocks of the split kernel
    i_b = i_bk // Hkv
    i_kh = i_bk % Hkv
    kv_len = tl.load(KvLen)
    o_m, m_m, o_g, o_r, pos_q = _rows(i_mb, R, kv_len, GROUP, MERGE_M)
    i_rb = (i_mb * MERGE_M) // BLOCK_M  # the split kernel's row block of these rows
    o_d = i_db * MERGE_D + tl.arange(0, MERGE_D)
    m_d = o_d < D
    n_slot = n_bkv * n_rb * splits * BLOCK_M
    base = (i_bk * n_rb + i_rb) * splits * BLOCK_M + o_m % BLOCK_M  # [MM] slots of split 0
    b_mx = tl.full([MERGE_M], -1.0e30, tl.float32)
    b_l = tl.zeros([MERGE_M], tl.float32)
    b_a = tl.zeros([MERGE_M], tl.float32)
    b_q2 = tl.zeros([MERGE_M], tl.float32)
    b_pm = tl.zeros([MERGE_M], tl.float32)
    b_n = tl.zeros([MERGE_M], tl.float32)
    b_acc = tl.zeros([MERGE_M, MERGE_D], tl.float32)
    # the fixed reduction order, SPLIT_BLOCK splits at a time (a serial loop over single splits was
    # latency-bound: 19 us per layer for 64 splits at 32K keys on the H200); the split count is a
    # runtime value, so a cache that grows (which changes the default count) never recompiles
    i_s = 0
    while i_s < splits:
        b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n = _merge_chunk(
            (b_mx, b_l, b_acc, b_a, b_q2, b_pm, b_n), Part, Acc, n_slot, base, i_s, splits, m_m, o_d, m_d,
            BLOCK_M, BLOCK_D, SPLIT_BLOCK,
        )  # fmt: skip
        i_s += SPLIT_BLOCK

    i_h = i_kh * GROUP + o_g  # [MM] query head
    has = b_l > 0.0
    b_ls = tl.where(has, b_l, 1.0)
    b_nan = tl.where(b_l != b_l, float("nan"), 0.0)  # a NaN/+inf visible score: a NaN row (SEMANTICS.md)
    p_o = Out + i_b * sob + i_h[:, None] * soh + o_r[:, None] * som + o_d[None, :] * sod
    b_o = b_acc / b_ls[:, None] + b_nan[:, None]
    tl.store(p_o, b_o.to(Out.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])
    _finish_rows(
        Q, K, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, Start,
        sqb, sqh, sqm, sqd, skb, skh, skn, skd, smb, spb, stf, stb, sth, sta, sdb, sdh, sda, svb, svh,
        sva, ssb, ssh, ssa, sss, Hq, R, S, scale, softcap, window, log_eps, kv_len, i_b, i_kh,
        i_h, o_r, m_m, pos_q, b_mx, b_ls, has, b_nan, b_a, b_q2, b_pm, b_n, i_db, n_db,
        D, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, LOOKUPS, HAS_START, BLOCK_D,
    )  # fmt: skip


@triton.jit
def _finish_rows(
    Q, K, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, Start,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, smb, spb, stf, stb, sth, sta, sdb, sdh, sda, svb, svh, sva,
    ssb, ssh, ssa, sss, Hq, R, S, scale, softcap, window, log_eps, kv_len,
    i_b, i_kh, i_h, o_r, m_m, pos_q, b_mx, b_ls, has, b_nan, b_a, b_q2, b_pm, b_n, i_db, n_db,
    D: tl.constexpr, HAS_MASK: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ROWS: tl.constexpr, LOOKUPS: tl.constexpr, HAS_START: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """LSE, T1 and the T2 lookups of merged rows (``[MM]`` vectors of the merged state).

    Every column block ``i_db`` of ``n_db`` holds the whole merged state of its rows, so the jobs are
    dealt round-robin (job ``j`` on block ``j % n_db``): 0 LSE and T1, 1 the diagonal, 2 the previous
    token, ``3 + s`` sink ``s``. Each lookup re-scores one key per row against the whole head dim.
    """
    b_lse2 = tl.where(has, b_mx + tl.log2(b_ls), float("-inf")) + b_nan
    o_a = o_r.to(tl.int64)  # [MM] slot of each row in the per-row outputs (RowTargets)
    if HAS_START:
        o_a += tl.load(Start)
    if i_db == 0:
        tl.store(Lse + (i_b * Hq + i_h) * R + o_r, b_lse2 * _LN2, mask=m_m)
        if ROWS:
            if not HAS_MASK:  # the split kernel counts visible keys only with a key mask
                b_n = pos_q.to(tl.float32) + 1.0
                if HAS_WINDOW:
                    b_n = tl.minimum(b_n, window * 1.0)
            p_t = Stats + i_b * stb + i_h * sth + o_a * sta  # [MM]
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
        o_d = tl.arange(0, BLOCK_D)  # the whole head dim
        m_d = o_d < D
        p_q = Q + i_b * sqb + i_h[:, None] * sqh + o_r[:, None] * sqm + o_d[None, :] * sqd
        b_q = tl.load(p_q, mask=m_m[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        p_k0 = K + i_b * skb + i_kh * skh
        p_km = KeyMask + i_b * smb
        args = (kv_len, skn, skd, o_d, m_d, scale, softcap, window)
        if i_db == 1 % n_db:
            b_d = lookup(b_q, p_k0, p_km, pos_q, pos_q, m_m, b_lse2, *args, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW)
            tl.store(Diag + i_b * sdb + i_h * sdh + o_a * sda, tl.maximum(b_d * _LN2, log_eps), mask=m_m)
        if i_db == 2 % n_db:
            plen = tl.load(PromptLen + i_b)
            b_pv = lookup(
                b_q, p_k0, p_km, pos_q - 1, pos_q, m_m & (pos_q > plen), b_lse2, *args,
                HAS_MASK, HAS_SOFTCAP, HAS_WINDOW,
            )  # fmt: skip
            tl.store(Prev + i_b * svb + i_h * svh + o_a * sva, tl.exp2(b_pv), mask=m_m)
        p_sk = Sinks + i_b * ssb + i_h * ssh + o_a * ssa  # [MM]
        i_s = (i_db + n_db - 3 % n_db) % n_db  # the first sink of this block: (3 + i_s) % n_db == i_db
        while i_s < S:
            pos_k = tl.zeros_like(pos_q) + tl.load(SinkPos + i_b * spb + i_s)
            b_w = lookup(b_q, p_k0, p_km, pos_k, pos_q, m_m, b_lse2, *args, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW)
            tl.store(p_sk + i_s * sss, tl.exp2(b_w), mask=m_m)
            i_s += n_db


@triton.jit
def _row_lse2(Part, n_slot, base, splits, BLOCK_M: tl.constexpr, SPLIT_BLOCK: tl.constexpr):
    """The merged LSE (log2 units) of one row from its partial states (slot ``base`` of split 0).

    The same running merge of ``m`` and ``l`` as `_merge_chunk`, ``SPLIT_BLOCK`` splits at a time in
    a fixed order (so bitwise identical across runs); NaN when a split's ``l`` is NaN, ``-inf`` for a
    row that sees no key.
    """
    b_mx = tl.max(tl.full([SPLIT_BLOCK], -1.0e30, tl.float32), 0)
    b_l = tl.sum(tl.zeros([SPLIT_BLOCK], tl.float32), 0)
    i_s = 0
    while i_s < splits:
        o_s = i_s + tl.arange(0, SPLIT_BLOCK)
        m_s = o_s < splits
        s_mx = tl.load(Part + o_s * BLOCK_M + base, mask=m_s, other=-1.0e30)
        s_l = tl.load(Part + n_slot + o_s * BLOCK_M + base, mask=m_s, other=0.0)
        mx = tl.maximum(b_mx, tl.max(s_mx, 0))
        b_l = tl.exp2(b_mx - mx) * b_l + tl.sum(tl.exp2(s_mx - mx) * s_l, 0)
        b_mx = mx
        i_s += SPLIT_BLOCK
    has = b_l > 0.0
    b_nan = tl.where(b_l != b_l, float("nan"), 0.0)
    return tl.where(has, b_mx + tl.log2(tl.where(has, b_l, 1.0)), float("-inf")) + b_nan


@triton.jit
def _columns_program(
    i_n, i_bh, n_bkv, Part, Lse, Scores, Sum, Count, KeyMask, PromptLen, kv_len,
    ssr, smb, scb, sch, scn, sntb, sntn, Hq, R, window, splits,
    GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, LSE_FROM_PART: tl.constexpr,
):  # fmt: skip
    """Add the weights of the ``R`` new rows of query head ``i_bh`` to the column sums of key block ``i_n``.

    The scores are the split kernel's (log2 units). Each row's LSE is merged again from the partial
    states (``LSE_FROM_PART``, `_row_lse2`: this program then needs nothing from the merge programs
    of its launch) or read from the merge's output ``Lse``. Only (row, key) pairs that the row sees
    and that count for T3 are read, so slots the split kernel did not write are never touched.
    """
    i_b = i_bh // Hq
    i_h = i_bh % Hq
    i_bk = i_b * (Hq // GROUP) + i_h // GROUP  # its batch x KV head
    n_rb = tl.cdiv(GROUP * R, BLOCK_M)
    n_slot = n_bkv * n_rb * splits * BLOCK_M
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
            if LSE_FROM_PART:
                o_m = (i_h % GROUP) * R + i_r  # the row's index among the G x R rows of its KV head
                base = (i_bk * n_rb + o_m // BLOCK_M) * splits * BLOCK_M + o_m % BLOCK_M
                b_lse2 = _row_lse2(Part, n_slot, base, splits, BLOCK_M, SPLIT_BLOCK)
            else:
                b_lse2 = tl.load(Lse + i_bh * R + i_r) * 1.4426950408889634
            # a row of only -inf scores (lse -inf) counts with weight 0: +inf makes each exp2 0
            b_lse2 = tl.where(b_lse2 == float("-inf"), float("inf"), b_lse2)
            counted = pos_q >= plen  # a NaN row counts (and gives NaN)
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


@triton.jit(do_not_specialize=["R", "window", "S", "splits", "n_merge", "n_col"])
def _merge_kernel(
    Q, K, Part, Acc, Out, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, KvLen, Start,
    Scores, Sum, Count,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, sob, soh, som, sod, smb, spb,
    stf, stb, sth, sta, sdb, sdh, sda, svb, svh, sva, ssb, ssh, ssa, sss,
    ssr, scb, sch, scn, sntb, sntn,
    Hq, Hkv, R, S, scale, softcap, window, log_eps, splits, n_bkv, n_mb, n_db, n_merge, n_col,
    D: tl.constexpr, GROUP: tl.constexpr, HAS_MASK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_WINDOW: tl.constexpr, ROWS: tl.constexpr, LOOKUPS: tl.constexpr,
    HAS_START: tl.constexpr, COLUMNS: tl.constexpr, WHILE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, MERGE_M: tl.constexpr, MERGE_D: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
    COL_N: tl.constexpr,
):  # fmt: skip
    """One launch for the merge and (with ``COLUMNS``) the running columns, on a 1-D grid.

    Programs ``[0, n_merge)`` are the merge's (batch x KV head, row block, column block), in that
    order (`_merge_program`); the ``n_col`` programs after them are the columns' (key block of
    ``COL_N`` keys, batch x query head) (`_columns_program`), which merge their rows' LSE again
    themselves, so no program waits for another.
    """
    pid = tl.program_id(0)
    kv_len = tl.load(KvLen)
    if pid < n_merge:
        i_bk = (pid // (n_mb * n_db)).to(tl.int64)
        _merge_program(
            i_bk, (pid // n_db) % n_mb, pid % n_db, n_bkv, n_db,
            Q, K, Part, Acc, Out, Lse, Stats, Diag, Prev, Sinks, SinkPos, KeyMask, PromptLen, KvLen, Start,
            sqb, sqh, sqm, sqd, skb, skh, skn, skd, sob, soh, som, sod, smb, spb,
            stf, stb, sth, sta, sdb, sdh, sda, svb, svh, sva, ssb, ssh, ssa, sss,
            Hq, Hkv, R, S, scale, softcap, window, log_eps, splits,
            D, GROUP, HAS_MASK, HAS_SOFTCAP, HAS_WINDOW, ROWS, LOOKUPS, HAS_START, WHILE, BLOCK_M, BLOCK_D,
            MERGE_M, MERGE_D, SPLIT_BLOCK,
        )  # fmt: skip
    if COLUMNS:
        if pid >= n_merge:
            c = pid - n_merge
            n_kb = n_col // (n_bkv * GROUP)  # key blocks per query head
            _columns_program(
                c % n_kb, (c // n_kb).to(tl.int64), n_bkv, Part, Lse, Scores, Sum, Count, KeyMask,
                PromptLen, kv_len, ssr, smb, scb, sch, scn, sntb, sntn, Hq, R, window, splits,
                GROUP, HAS_MASK, HAS_WINDOW, BLOCK_M, SPLIT_BLOCK, COL_N, True,
            )  # fmt: skip


@triton.jit(do_not_specialize=["R", "window", "splits"])
def _columns_kernel(
    Part, Lse, Scores, Sum, Count, KeyMask, PromptLen, KvLen,
    ssr, smb, scb, sch, scn, sntb, sntn, Hq, R, window, splits, n_bkv,
    GROUP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_WINDOW: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """The running columns as a launch of their own after the merge, reading the merged LSE.

    One program per (key block, batch x query head): faster than inside the merge's launch for calls
    of many rows (`fused.FUSE_COLUMNS_ROWS`).
    """
    _columns_program(
        tl.program_id(0), tl.program_id(1).to(tl.int64), n_bkv, Part, Lse, Scores, Sum, Count, KeyMask,
        PromptLen, tl.load(KvLen), ssr, smb, scb, sch, scn, sntb, sntn, Hq, R, window, splits,
        GROUP, HAS_MASK, HAS_WINDOW, BLOCK_M, 1, BLOCK_N, False,
    )  # fmt: skip
