"""Readable fp64 reference of the decoding op: new rows against the first ``kv_len`` keys of a cache.

The new rows are the last ``R`` of the ``kv_len`` valid keys, so this is the response-stage reference
([`flashstats_kernels.naive.naive_response_attention`][flashstats_kernels.naive_response_attention]) on the
valid part of the cache, plus the increments that the rows add to the running column state (``SEMANTICS.md``,
"Decoding").
"""

from __future__ import annotations

from typing import Any

import torch

from flashstats_kernels.ops.columns.naive import naive_counted_rows
from flashstats_kernels.ops.forward.naive import naive_forward, naive_probabilities, naive_row_stats
from flashstats_kernels.ops.lookups.naive import naive_lookups_from_probs
from flashstats_kernels.types import AttentionResult, LookupStats


def naive_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv_len: int,
    key_mask: torch.Tensor | None,
    prompt_len: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    sink_positions: torch.Tensor,
    diag_eps: float,
) -> tuple[AttentionResult, torch.Tensor, torch.Tensor]:
    """fp64 decoding step: output, LSE, T1, T2 of the new rows and their column increments.

    Args:
        q: [B, Hq, R, D]. the new rows, at cache positions ``kv_len - R + i``.
        k: [B, Hkv, Lc, D]. the key cache; only keys ``j < kv_len`` exist.
        v: [B, Hkv, Lc, D]. the value cache.
        kv_len: number of valid keys (the new rows' own keys included).
        key_mask: [B, Lc] bool or None. True marks a real token.
        prompt_len: [B] int64. keys ``j < prompt_len[b]`` are prompt keys.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        sink_positions: [B, S] int64. key positions read by the sink lookups.
        diag_eps: clamp of ``diag_log``.

    Returns:
        ``(result, col_sum [B, Hq, Lc], col_count [B, Lc])`` float64: ``result`` holds out, lse, rows and
        lookups; the two tensors are what the rows add to the running column sums and counts.
    """
    b, hq, _, _ = q.shape
    cache = k.shape[2]
    kv, vv = k[:, :, :kv_len], v[:, :, :kv_len]
    mask = None if key_mask is None else key_mask[:, :kv_len]
    opts: dict[str, Any] = dict(key_mask=mask, scale=scale, softcap=softcap, window=window)
    out, lse, _ = naive_forward(q, kv, vv, prompt_len=prompt_len, **opts)
    s, visible, _, p = naive_probabilities(q, kv, **opts)
    lookups: LookupStats = naive_lookups_from_probs(
        p, s, lse, visible, prompt_len=prompt_len, sink_positions=sink_positions, diag_eps=diag_eps
    )
    counted = naive_counted_rows(visible, key_mask=mask, prompt_len=prompt_len)  # [B, R]
    col_sum = torch.zeros(b, hq, cache, dtype=torch.float64, device=q.device)
    col_count = torch.zeros(b, cache, dtype=torch.float64, device=q.device)
    col_sum[:, :, :kv_len] = (p * counted[:, None, :, None]).sum(2)
    col_count[:, :kv_len] = (visible[:, 0] & counted[:, :, None]).sum(1).double()
    rows = naive_row_stats(p, s, lse, visible, prompt_len)
    return AttentionResult(out=out, lse=lse, rows=rows, lookups=lookups), col_sum, col_count
