"""``torch.library`` registration of the Triton kernels: ``flashstats::{forward,lookups,columns}``.

Each op is opaque to ``torch.compile``: Dynamo records one call, and its fake implementation gives the
exact shapes, dtypes and strides of the outputs without running a kernel, so a compiled function that
calls `flashstats_kernels.response_attention` is one graph (``fullgraph=True``) and Inductor never
tries to compile our kernels itself. The ops do no host synchronisation, so they can be captured in CUDA
graphs.

Gradients: the ops have no backward. The Triton forward is an inference kernel (it keeps no softmax
state for a backward pass, and the statistics are features, not training targets), so asking for a
gradient through it raises `NotImplementedError` that says so and names the alternative
(``backend="torch"``, whose chunked PyTorch ops are differentiable). Running the forward on inputs that
require gradients is allowed; only the backward raises.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import Tensor

from flashstats_kernels.types import ColumnStats, LookupStats, RowStats

ROW_STAT_FIELDS = ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support")
"""Order of the row statistics in the packed ``[5, B, Hq, R]`` output of ``flashstats::forward``."""

NO_GRADIENT = (
    "flashstats: the Triton kernels compute no gradients (they are inference kernels: the forward keeps "
    "no state for a backward pass). Run under torch.no_grad() / torch.inference_mode(), detach the "
    "inputs, or pass backend='torch' (chunked PyTorch ops, differentiable) to train through it."
)


def _fused(op: str) -> Any:
    """The Triton launcher module of one op, imported on first use (never at package import)."""
    return importlib.import_module(f"flashstats_kernels.ops.{op}.fused")


@torch.library.custom_op("flashstats::forward", mutates_args=())
def forward_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    rows: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Triton forward: ``(out [B, Hq, R, D], lse [B, Hq, R] f32, stats [5 or 0, B, Hq, R] f32)``."""
    out, lse, stats = _fused("forward").forward_triton(
        q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
        rows=rows,
    )  # fmt: skip
    if stats is None:
        return out, lse, lse.new_empty((0, *lse.shape))
    return out, lse, torch.stack([getattr(stats, f) for f in ROW_STAT_FIELDS])


@forward_op.register_fake
def _forward_fake(q, k, v, key_mask, prompt_len, scale, softcap, window, rows):
    b, hq, r, d = q.shape
    out = q.new_empty((b, hq, r, d))
    lse = q.new_empty((b, hq, r), dtype=torch.float32)
    return out, lse, q.new_empty((5 if rows else 0, b, hq, r), dtype=torch.float32)


@torch.library.custom_op("flashstats::lookups", mutates_args=())
def lookups_op(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    sink_positions: Tensor,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    diag_eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Triton T2: ``(diag_log [B, Hq, R], prev_weight [B, Hq, R], sink_weights [B, Hq, R, S])``, f32."""
    res = _fused("lookups").lookups_triton(
        q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
        sink_positions=sink_positions, diag_eps=diag_eps,
    )  # fmt: skip
    return res.diag_log, res.prev_weight, res.sink_weights


@lookups_op.register_fake
def _lookups_fake(q, k, lse, sink_positions, key_mask, prompt_len, scale, softcap, window, diag_eps):
    b, hq, r, _ = q.shape
    row = q.new_empty((b, hq, r), dtype=torch.float32)
    return row, torch.empty_like(row), q.new_empty((b, hq, r, sink_positions.shape[1]), dtype=torch.float32)


@torch.library.custom_op("flashstats::columns", mutates_args=())
def columns_op(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
) -> tuple[Tensor, Tensor]:
    """Triton T3: ``(sum [B, Hq, L], mean [B, Hq, L])``, f32."""
    res = _fused("columns").columns_triton(
        q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    return res.sum, res.mean


@columns_op.register_fake
def _columns_fake(q, k, lse, key_mask, prompt_len, scale, softcap, window):
    b, hq = q.shape[:2]
    col = q.new_empty((b, hq, k.shape[2]), dtype=torch.float32)
    return col, torch.empty_like(col)


def _no_backward(ctx: Any, *grads: Tensor) -> Any:
    raise NotImplementedError(NO_GRADIENT)


def _no_context(ctx: Any, inputs: tuple, output: Any) -> None:
    pass


for _op in (forward_op, lookups_op, columns_op):
    _op.register_autograd(_no_backward, setup_context=_no_context)


# ----------------------------------------------------------------------------------------------------
# The Triton backend of `flashstats_kernels.api`: the launchers' signatures, through the ops.


def forward_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    rows: bool,
    varlen: Any = None,
) -> tuple[Tensor, Tensor, RowStats | None]:
    """`flashstats_kernels.ops.forward.fused.forward_triton` through ``flashstats::forward``.

    Packed (``varlen``) launches call the launcher directly: they are not registered as ops yet.
    """
    if varlen is not None:
        return _fused("forward").forward_triton(
            q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
            rows=rows, varlen=varlen,
        )  # fmt: skip
    out, lse, stats = forward_op(q, k, v, key_mask, prompt_len, scale, softcap, window, rows)
    if not rows:
        return out, lse, None
    return out, lse, RowStats(*stats.unbind(0))


def lookups_triton(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    *,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    sink_positions: Tensor,
    diag_eps: float,
    varlen: Any = None,
) -> LookupStats:
    """`flashstats_kernels.ops.lookups.fused.lookups_triton` through ``flashstats::lookups``."""
    if varlen is not None:  # packed launches: not registered as ops yet
        return _fused("lookups").lookups_triton(
            q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
            sink_positions=sink_positions, diag_eps=diag_eps, varlen=varlen,
        )  # fmt: skip
    diag, prev, sinks = lookups_op(
        q, k, lse, sink_positions, key_mask, prompt_len, scale, softcap, window, diag_eps
    )
    return LookupStats(diag_log=diag, prev_weight=prev, sink_weights=sinks)


def columns_triton(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    *,
    key_mask: Tensor | None,
    prompt_len: Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    varlen: Any = None,
) -> ColumnStats:
    """`flashstats_kernels.ops.columns.fused.columns_triton` through ``flashstats::columns``."""
    if varlen is not None:  # packed launches: not registered as ops yet
        return _fused("columns").columns_triton(
            q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
            varlen=varlen,
        )  # fmt: skip
    col_sum, col_mean = columns_op(q, k, lse, key_mask, prompt_len, scale, softcap, window)
    return ColumnStats(sum=col_sum, mean=col_mean)
