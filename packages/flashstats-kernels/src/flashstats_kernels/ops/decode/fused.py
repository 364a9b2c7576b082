"""Split-K decoding (flash-decoding) with T1, T2 and running T3 statistics: the launcher.

Two or three launches per step (the kernels are in `kernels`), all with grids fixed by the tensor shapes
(``kv_len`` is read on the device, so a step can be captured in a CUDA graph and replayed as the cache
grows):

1. ``_split_kernel``: one program per (key split, batch x KV head, row block). The rows of a program
   are the ``G x R`` query rows (``G`` query heads of one KV head, ``R`` new rows) that read the same
   keys; it streams the key tiles of its split with the forward's tile step and writes its partial
   state: running max ``m``, ``l``, the entropy, squared-weight and prompt-mass accumulators, the
   visible-key count (with a key mask; otherwise the merge knows it) and the unnormalised output.
   Without a key mask only the tiles that hold the window's lower edge or keys past the first new
   row test visibility; every other tile takes the forward's unmasked step (`fwd_inner`). Programs of
   at most `LAZY_T1_ROWS` rows keep the entropy and squared-weight sums per score and reduce them once.
2. ``_merge_kernel``: one program per (batch x KV head, block of at most 16 rows, block of the head
   dim: a quarter, at least 16 columns) merges the partial states of its rows and output columns, a
   chunk of up to 64 splits at a time in a fixed reduction tree, with the package's merge rule
   (``state.merge_states``; here in log2 units with the entropy accumulator shifted by ``m``, as in
   the forward kernel) and writes its part of the output; the per-row work (LSE and T1, and each T2
   lookup read off the merged LSE) is dealt over the column blocks, which all hold the merged state.
   The order is fixed, so results are bitwise identical across runs; the split count changes them
   only by fp32 rounding.
3. The running columns (T3 only): the split kernel also stores the scores of every (row, visible
   key) it computed, in log2 units, into a ``[B, Hq, R, Lc]`` float32 scratch; one program per (key
   block, batch x query head) turns them into weights with the merged LSE and adds them (and, for
   head 0, the row counts) to the running column state. No key is read twice: the pass reads 4 bytes
   per score instead of re-scoring the rows against the keys (``2 D`` bytes per key and KV head).
   Each program owns its slots and runs the rows in a fixed order: no atomics. Calls of at most
   `FUSE_COLUMNS_ROWS` rows (decoding steps) run these programs in the merge's launch, after its
   programs on the same 1-D grid, each merging its rows' LSE again from the split states (so no
   program waits for another); calls of more rows launch ``_columns_kernel`` after the merge, which
   reads the merged LSE.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import torch
import triton

from flashstats_kernels._problem import fold_scale_sign
from flashstats_kernels.ops._fused import interpreting, launch_geometry
from flashstats_kernels.ops.decode.kernels import N_STATE, _columns_kernel, _merge_kernel, _split_kernel
from flashstats_kernels.state import ColumnState, RowTargets
from flashstats_kernels.types import AttentionResult, LookupStats, RowStats

CONFIG_OVERRIDES: dict[str, int] = {}
"""Entries that replace `decode_config`'s on the GPU (``BLOCK_N``, ``SPLIT_WARPS``): for tuning sweeps
(``benchmarks/decode_kernels.py --sweep-configs``); empty in normal use."""


def decode_config(block_d: int, group_rows: int) -> dict[str, int]:
    """Tile sizes of the three decoding kernels.

    Rows per split program, keys per tile, warps (``SPLIT_WARPS`` of the split kernel, ``num_warps``
    of the others), the merge kernel's rows and output columns per program (``MERGE_M`` divides
    ``BLOCK_M``; four column blocks, so that a few KV heads still fill the GPU) and the columns
    kernel's keys per program. `CONFIG_OVERRIDES` replaces entries on the GPU.
    """
    block_m = max(16, min(64, triton.next_power_of_2(group_rows)))
    merge_m = min(16, triton.next_power_of_2(group_rows))
    merge_d = max(16, block_d // 4)
    if interpreting():
        return {"BLOCK_M": block_m, "BLOCK_N": 16, "COL_N": 16, "MERGE_M": merge_m, "MERGE_D": merge_d,
                "num_warps": 4, "SPLIT_WARPS": 4}  # fmt: skip
    block_n = 32 if block_d > 128 else 64
    cfg = {"BLOCK_M": block_m, "BLOCK_N": block_n, "COL_N": 512, "MERGE_M": merge_m, "MERGE_D": merge_d,
           "num_warps": 4, "SPLIT_WARPS": 4}  # fmt: skip
    return {**cfg, **CONFIG_OVERRIDES}


def column_block(cache: int, heads: int, col_n: int) -> int:
    """Keys per columns program: ``col_n`` (the config's) up to 4x that, about 512 programs in all.

    The columns programs share the merge's launch and so its register budget (`_merge_kernel`), which
    leaves few programs per SM: with many (key block, query head) pairs each program takes a longer
    key block, keeping more loads in flight per thread. Depends on the cache capacity alone, so a
    captured step keeps its grid.
    """
    want = triton.next_power_of_2(max(1, -(-cache * heads // 512)))
    return max(col_n, min(4 * col_n, want))


def merge_split_block(splits: int, merge_m: int, merge_d: int) -> int:
    """Splits the merge kernel reads at once: a power of two up to 64 and no more than ``splits`` needs.

    Its ``[SB, MM, MD]`` chunk of partial outputs stays within 8K fp32 values (64 per thread of the
    kernel's 4 warps).
    """
    fit = max(1, (1 << 13) // (merge_m * merge_d))
    return max(1, min(64, 1 << (fit.bit_length() - 1), triton.next_power_of_2(splits)))


def default_splits(batch_kv: int, row_blocks: int, cache: int, block_n: int) -> int:
    """Key splits that give about two programs per SM of an H100/H200, from the cache capacity alone.

    The choice depends only on shapes (never on ``kv_len``), so a captured step keeps its grid.
    """
    want = -(-264 // max(1, batch_kv * row_blocks))
    return max(1, min(want, 64, -(-cache // (4 * block_n))))


FUSE_COLUMNS_ROWS = 1
"""Calls of at most this many new rows per head run the running columns inside the merge's launch.

Measured on the H200 (2026-12-02, one attention layer, all statistics): a decoding step (R = 1) is
faster fused (SmolLM2 8K 20.6 -> 16.7 us, Qwen3 0.6B 8K 26.6 -> 22.9 us), a 16-row chunk slower
(Llama 8B 8K 85.7 -> 100.7 us, 32K 157.9 -> 225.7 us: the columns then run at the merge's occupancy)."""

LAZY_T1_ROWS = 16
"""Split programs of at most this many rows keep T1's entropy and squared-weight sums per score
(`fwd_tile`'s ``LAZY``): a tile of 16 rows is spread over the warps along its keys, so each row sum
per key tile crosses warps; per score, the sums are reduced once per program instead."""

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
    part = torch.empty(N_STATE, bkv * n_rb * n_split * bm, dtype=torch.float32, device=dev)
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
        WHILE=interpreting(), BLOCK_D=g.block_d,
    )  # fmt: skip
    _split_kernel[(n_split, bkv, n_rb)](
        q, k, v, part, acc, scores, g.key_mask, plen, kvl,
        *q.stride(), *k.stride(), *v.stride(), g.mask_stride, scores.stride(0),
        g.Hq, g.Hq // g.group, g.R, float(scale), g.softcap, g.window, n_split,
        ROWS=rows, SCORES=columns is not None, MMA=g.mma, BLOCK_M=bm, BLOCK_N=bn, **flags,
        LAZY=rows and bm <= LAZY_T1_ROWS, num_warps=cfg["SPLIT_WARPS"],
    )  # fmt: skip
    mm, md = cfg["MERGE_M"], cfg["MERGE_D"]
    n_mb, n_db = triton.cdiv(g.group * g.R, mm), triton.cdiv(g.block_d, md)
    n_merge = bkv * n_mb * n_db
    # single-row calls (decoding steps) run the columns in the merge's launch; calls of more rows run
    # them as a launch of their own (measured: 1.2x to 1.4x faster there, see FUSE_COLUMNS_ROWS)
    fuse = columns is not None and g.R <= FUSE_COLUMNS_ROWS
    col_n = column_block(g.L, g.B * g.Hq, cfg["COL_N"])
    n_col = triton.cdiv(g.L, col_n) * g.B * g.Hq if fuse else 0
    col_sum = columns.sum if columns is not None else scores
    col_cnt = columns.count if columns is not None else scores
    col_strides = (*col_sum.stride(), *col_cnt.stride()) if columns is not None else (0,) * 5
    _merge_kernel[(n_merge + n_col,)](
        q, k, part, acc, out, lse, stats, diag, prev, sinks, pos, g.key_mask, plen, kvl, start,
        scores, col_sum, col_cnt,
        *q.stride(), *k.stride(), *out.stride(), g.mask_stride, pos.stride(0),
        *stats.stride(), *diag.stride(), *prev.stride(), *sinks.stride(), scores.stride(0), *col_strides,
        g.Hq, g.Hq // g.group, g.R, n_sinks, float(scale), g.softcap, g.window, math.log(diag_eps),
        n_split, bkv, n_mb, n_db, n_merge, n_col, ROWS=rows, LOOKUPS=sink_positions is not None,
        HAS_START=targets is not None, COLUMNS=fuse, BLOCK_M=bm, MERGE_M=mm, MERGE_D=md,
        SPLIT_BLOCK=merge_split_block(n_split, mm, md), COL_N=col_n, **flags, num_warps=cfg["num_warps"],
    )  # fmt: skip
    if columns is not None and not fuse:
        _columns_kernel[(triton.cdiv(g.L, cfg["COL_N"]), g.B * g.Hq)](
            part, lse, scores, col_sum, col_cnt, g.key_mask, plen, kvl, scores.stride(0), g.mask_stride,
            *col_strides, g.Hq, g.R, g.window, n_split, bkv, GROUP=g.group, HAS_MASK=g.has_mask,
            HAS_WINDOW=g.has_window, BLOCK_M=bm, BLOCK_N=cfg["COL_N"], num_warps=cfg["num_warps"],
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


__all__ = [
    "FUSE_COLUMNS_ROWS",
    "LAZY_T1_ROWS",
    "SCORE_ELEMENTS",
    "column_block",
    "decode_triton",
    "default_splits",
    "merge_split_block",
]
