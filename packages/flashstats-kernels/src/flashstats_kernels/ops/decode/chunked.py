"""Pure-PyTorch decoding op: the chunked response-stage ops on the valid part of the cache.

The new rows are the last ``R`` of the first ``kv_len`` keys, so the forward, the lookups and the
column pass of the chunked backend apply unchanged to ``k[:, :, :kv_len]``; the column sums they return
and the counts computed here are added to the running [`ColumnState`][flashstats_kernels.ColumnState].
This is the CPU path; it reads ``kv_len`` on the host.
"""

from __future__ import annotations

from typing import Any

import torch

from flashstats_kernels.ops._tiles import tile_visibility
from flashstats_kernels.ops.columns.chunked import columns_torch
from flashstats_kernels.ops.forward.chunked import forward_torch
from flashstats_kernels.ops.lookups.chunked import lookups_torch
from flashstats_kernels.state import ColumnState
from flashstats_kernels.types import AttentionResult


def column_counts(
    rows: int, kv_len: int, *, key_mask: torch.Tensor | None, prompt_len: torch.Tensor, window: int | None
) -> torch.Tensor:
    """``[B, kv_len] float32``: how many counted new rows see each key (``SEMANTICS.md``, T3).

    A row counts iff its position is at or after ``prompt_len[b]``, its own token is real and it sees a key.
    """
    dev = prompt_len.device
    vis = tile_visibility(0, rows, rows, kv_len, key_mask=key_mask, window=window, device=dev)  # [B|1, R, L]
    pos = torch.arange(kv_len - rows, kv_len, device=dev)
    counted = (pos[None, :] >= prompt_len[:, None]) & vis.any(-1)  # [B, R]
    if key_mask is not None:
        counted = counted & key_mask[:, kv_len - rows :]
    return (vis & counted[:, :, None]).sum(1).float()


def decode_torch(
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
    rows: bool,
    sink_positions: torch.Tensor | None,
    diag_eps: float,
    columns: ColumnState | None,
    splits: int | None = None,
) -> AttentionResult:
    """One decoding step in chunked PyTorch (the arguments of ``decode_triton``; ``splits`` is ignored).

    Returns:
        AttentionResult with out, lse, rows (if ``rows``) and lookups (if ``sink_positions`` is given);
        ``columns`` (a ColumnState) is updated in place.
    """
    del splits
    kv, vv = k[:, :, :kv_len], v[:, :, :kv_len]
    mask = None if key_mask is None else key_mask[:, :kv_len]
    opts: dict[str, Any] = dict(
        key_mask=mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    out, lse, row_stats = forward_torch(q, kv, vv, rows=rows, **opts)
    result = AttentionResult(out=out, lse=lse, rows=row_stats)
    if sink_positions is not None:
        result.lookups = lookups_torch(q, kv, lse, sink_positions=sink_positions, diag_eps=diag_eps, **opts)
    if columns is not None:
        inc = columns_torch(q, kv, lse, **opts)
        columns.sum[:, :, :kv_len] += inc.sum
        columns.count[:, :kv_len] += column_counts(
            q.shape[2], kv_len, key_mask=mask, prompt_len=prompt_len, window=window
        )
    return result
