"""``torch.library`` registration of the Triton kernels: ``flashstats::{forward,lookups,columns}``.

Each op is opaque to ``torch.compile``: Dynamo records one call, and its fake implementation gives the
exact shapes, dtypes and strides of the outputs without running a kernel, so a compiled function that
calls `flashstats_kernels.response_attention` is one graph (``fullgraph=True``) and Inductor never
tries to compile our kernels itself. The ops do no host synchronisation, so they can be captured in CUDA
graphs.

Packed (varlen) launches go through the same ops: the sequence table ``seq`` (``[N, 4] int64``, see
`Varlen`) and its bounds are optional arguments, and the fake implementations give the packed layouts
(``out`` with token-major ``[TQ, Hq, D]`` storage, as FlashAttention's varlen functions return it).

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

from flashstats_kernels._problem import Varlen
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


def _varlen(
    seq: Tensor | None, max_rows: int, max_keys: int, full_rows: bool, full_keys: bool
) -> Varlen | None:
    """The `Varlen` of a packed launch from the ops' arguments (None: a dense launch)."""
    return None if seq is None else Varlen(seq, max_rows, max_keys, full_rows, full_keys)


def _varlen_args(varlen: Varlen | None) -> tuple[Tensor | None, int, int, bool, bool]:
    """The ops' trailing arguments ``(seq, max_rows, max_keys, full_rows, full_keys)`` of a launch."""
    if varlen is None:
        return None, 0, 0, True, True
    return varlen.table, varlen.max_rows, varlen.max_keys, varlen.full_rows, varlen.full_keys


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
    seq: Tensor | None = None,
    max_rows: int = 0,
    max_keys: int = 0,
    full_rows: bool = True,
    full_keys: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Triton forward: ``(out [B, Hq, R, D], lse [B, Hq, R] f32, stats [5 or 0, B, Hq, R] f32)``.

    Packed (``seq`` given, ``B = 1``, ``R = TQ``): ``out`` has token-major ``[TQ, Hq, D]`` storage.
    """
    out, lse, stats = _fused("forward").forward_triton(
        q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
        rows=rows, varlen=_varlen(seq, max_rows, max_keys, full_rows, full_keys),
    )  # fmt: skip
    if stats is None:
        return out, lse, lse.new_empty((0, *lse.shape))
    return out, lse, torch.stack([getattr(stats, f) for f in ROW_STAT_FIELDS])


@forward_op.register_fake
def _forward_fake(q, k, v, key_mask, prompt_len, scale, softcap, window, rows, seq=None, *_varlen):
    b, hq, r, d = q.shape
    out = q.new_empty((b, hq, r, d)) if seq is None else q.new_empty((r, hq, d)).permute(1, 0, 2)[None]
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
    seq: Tensor | None = None,
    max_rows: int = 0,
    max_keys: int = 0,
    full_rows: bool = True,
    full_keys: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Triton T2: ``(diag_log [B, Hq, R], prev_weight [B, Hq, R], sink_weights [B, Hq, R, S])``, f32.

    Packed (``seq`` given): ``B = 1``, ``R = TQ`` and ``sink_positions`` is ``[N, S]``.
    """
    res = _fused("lookups").lookups_triton(
        q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
        sink_positions=sink_positions, diag_eps=diag_eps,
        varlen=_varlen(seq, max_rows, max_keys, full_rows, full_keys),
    )  # fmt: skip
    return res.diag_log, res.prev_weight, res.sink_weights


@lookups_op.register_fake
def _lookups_fake(
    q, k, lse, sink_positions, key_mask, prompt_len, scale, softcap, window, diag_eps, *_varlen
):
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
    seq: Tensor | None = None,
    max_rows: int = 0,
    max_keys: int = 0,
    full_rows: bool = True,
    full_keys: bool = True,
) -> tuple[Tensor, Tensor]:
    """Triton T3: ``(sum [B, Hq, L], mean [B, Hq, L])``, f32 (packed: ``B = 1``, ``L = TK``)."""
    res = _fused("columns").columns_triton(
        q, k, lse, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window,
        varlen=_varlen(seq, max_rows, max_keys, full_rows, full_keys),
    )  # fmt: skip
    return res.sum, res.mean


@columns_op.register_fake
def _columns_fake(q, k, lse, key_mask, prompt_len, scale, softcap, window, *_varlen):
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
    varlen: Varlen | None = None,
) -> tuple[Tensor, Tensor, RowStats | None]:
    """`flashstats_kernels.ops.forward.fused.forward_triton` through ``flashstats::forward``."""
    out, lse, stats = forward_op(
        q, k, v, key_mask, prompt_len, scale, softcap, window, rows, *_varlen_args(varlen)
    )
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
    varlen: Varlen | None = None,
) -> LookupStats:
    """`flashstats_kernels.ops.lookups.fused.lookups_triton` through ``flashstats::lookups``."""
    diag, prev, sinks = lookups_op(
        q, k, lse, sink_positions, key_mask, prompt_len, scale, softcap, window, diag_eps,
        *_varlen_args(varlen),
    )  # fmt: skip
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
    varlen: Varlen | None = None,
) -> ColumnStats:
    """`flashstats_kernels.ops.columns.fused.columns_triton` through ``flashstats::columns``."""
    col_sum, col_mean = columns_op(
        q, k, lse, key_mask, prompt_len, scale, softcap, window, *_varlen_args(varlen)
    )
    return ColumnStats(sum=col_sum, mean=col_mean)
