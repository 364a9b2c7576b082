"""Public entry points: the response-stage forward and the standalone T2 / T3 post-passes."""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from flashstats_kernels import _library
from flashstats_kernels._problem import (
    TORCH_DTYPES,
    TRITON_DTYPES,
    Problem,
    check_lse,
    check_problem,
    normalize_sink_positions,
)
from flashstats_kernels.ops.columns.chunked import columns_torch
from flashstats_kernels.ops.forward.chunked import forward_torch
from flashstats_kernels.ops.lookups.chunked import lookups_torch
from flashstats_kernels.types import AttentionResult, ColumnStats, LookupStats, StatsRequest

BACKENDS = ("auto", "torch", "triton")


@dataclass(frozen=True)
class _Backend:
    """The three op implementations of one backend (same signatures for every backend)."""

    forward: Callable
    lookups: Callable
    columns: Callable


_TRITON = _Backend(
    forward=_library.forward_triton, lookups=_library.lookups_triton, columns=_library.columns_triton
)
"""The Triton kernels through their ``torch.library`` ops (imported on the first launch, never here)."""
_TORCH = _Backend(forward=forward_torch, lookups=lookups_torch, columns=columns_torch)
_HAS_TRITON = importlib.util.find_spec("triton") is not None


def resolve_backend(backend: str, q: torch.Tensor) -> str:
    """Checks ``backend`` against the device and dtype of ``q``; returns ``"torch"`` or ``"triton"``.

    ``"auto"`` picks Triton for CUDA tensors of a dtype it takes (when Triton is installed) and PyTorch
    otherwise.
    ``"triton"`` on CPU tensors is allowed only under Triton's interpreter (``TRITON_INTERPRET=1``).
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        triton_ok = q.is_cuda and q.dtype in TRITON_DTYPES and _HAS_TRITON
        backend = "triton" if triton_ok else "torch"
    if backend == "triton":
        if not q.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(
                f"backend='triton' needs CUDA tensors, got tensors on {q.device} "
                "(use backend='torch' on CPU, or set TRITON_INTERPRET=1 to run the kernels interpreted)"
            )
        if q.dtype not in TRITON_DTYPES:
            raise TypeError(f"backend='triton' takes dtypes {TRITON_DTYPES}, got {q.dtype}")
    elif q.dtype not in TORCH_DTYPES:
        raise TypeError(f"backend='torch' takes dtypes {TORCH_DTYPES}, got {q.dtype}")
    return backend


def _ops(backend: str) -> _Backend:
    return _TRITON if backend == "triton" else _TORCH


def _check_request(request: object) -> StatsRequest:
    if not isinstance(request, StatsRequest):
        raise TypeError(f"request must be a StatsRequest, got {type(request).__name__}")
    _check_diag_eps(request.diag_eps)
    return request


def _check_diag_eps(diag_eps: object) -> float:
    if isinstance(diag_eps, bool) or not isinstance(diag_eps, (int, float)):
        raise TypeError(f"diag_eps must be a float in (0, 1], got {diag_eps!r}")
    if not (0.0 < diag_eps <= 1.0) or math.isnan(diag_eps):
        raise ValueError(f"diag_eps must lie in (0, 1], got {diag_eps!r}")
    return float(diag_eps)


def _options(problem: Problem) -> dict:
    """Keyword arguments shared by every op: mask, prompt length, scale, softcap, window."""
    return {
        "key_mask": problem.key_mask,
        "prompt_len": problem.prompt_len,
        "scale": problem.scale,
        "softcap": problem.softcap,
        "window": problem.window,
    }


def response_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    request: StatsRequest = StatsRequest(),  # noqa: B008 (frozen dataclass)
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    backend: str = "auto",
) -> AttentionResult:
    """Attention of the response rows with the requested statistics, without materialising the weights.

    The ``R`` query rows are the last ``R`` positions of a sequence of ``L`` tokens: row ``i``
    (0-based) sits at position ``p_i = L - R + i``, so the causal mask is aligned to the bottom-right
    corner of the ``R x L`` response block. With ``L = 6``, ``R = 3`` (``x`` = visible):

    ```text
    key j:         0 1 2 3 4 5
    row 0 (p = 3)  x x x x . .
    row 1 (p = 4)  x x x x x .
    row 2 (p = 5)  x x x x x x
    ```

    A key is visible iff it is at or before the row's position, ``key_mask`` marks it real and (with a
    window ``w``) ``p_i - w < j``. The definitions of every statistic are in the statistics reference
    of the docs; T2 and T3 read the LSE that the forward writes, as
    [`response_lookups`][flashstats_kernels.response_lookups] and
    [`response_columns`][flashstats_kernels.response_columns] do after any forward.

    Args:
        q: [B, Hq, R, D] bf16/fp16/fp32 (fp8-e5m2 on Triton; fp64 on torch). queries of the response
            rows; any strides.
        k: [B, Hkv, L, D] q's dtype. keys; ``Hq % Hkv == 0`` (query head ``h`` reads KV head
            ``h // (Hq // Hkv)``); any strides.
        v: [B, Hkv, L, D] q's dtype. values.
        request: which statistic families to compute (each a compile-time kernel flag); with all off,
            this is a plain attention forward.
        key_mask: [B, L] bool or None. True marks a real token, False padding (None: all real).
        prompt_len: int, [B] integer tensor, or None (``L - R``). keys ``j < prompt_len[b]`` are prompt
            keys (prompt mass); rows at ``p_i < prompt_len[b]`` are left out of the column statistics.
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: ``c`` of the Gemma-style soft cap ``c * tanh(s / c)``, or None.
        window: sliding window ``w``: key ``j`` is visible from position ``p`` iff ``p - w < j <= p``.
        backend: ``"triton"`` (CUDA tensors, or CPU under ``TRITON_INTERPRET=1``), ``"torch"`` (chunked
            PyTorch, memory linear in L) or ``"auto"`` (Triton on CUDA, PyTorch otherwise).

    Returns:
        AttentionResult: ``out`` [B, Hq, R, D] in q's dtype, ``lse`` [B, Hq, R] float32 (natural log,
        ``-inf`` on a row that sees no key), and ``rows`` / ``lookups`` / ``columns`` when requested
        (float32), else None.

    Raises:
        ValueError: a shape, size, device, option value or backend that is not supported.
        TypeError: an argument of the wrong type or dtype.

    Shape:
        - q: ``[B, Hq, R, D]``, k and v: ``[B, Hkv, L, D]``, with ``1 <= R <= L``, ``D <= 256``.
        - out: ``[B, Hq, R, D]``; lse and every row statistic: ``[B, Hq, R]``.
        - lookups.sink_weights: ``[B, Hq, R, S]``; columns.sum and columns.mean: ``[B, Hq, L]``.
    """
    problem = check_problem(
        q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    request = _check_request(request)
    ops = _ops(resolve_backend(backend, q))
    options = _options(problem)
    sinks = (
        normalize_sink_positions(request.sink_positions, problem.batch, q.device) if request.lookups else None
    )
    out, lse, rows = ops.forward(q, k, v, rows=request.rows, **options)
    result = AttentionResult(out=out, lse=lse, rows=rows)
    if request.lookups:
        result.lookups = ops.lookups(q, k, lse, sink_positions=sinks, diag_eps=request.diag_eps, **options)
    if request.columns:
        result.columns = ops.columns(q, k, lse, **options)
    return result


def response_lookups(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    *,
    sink_positions: tuple[int, ...] | torch.Tensor = (0,),
    diag_eps: float = 1e-30,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    backend: str = "auto",
) -> LookupStats:
    """T2 lookups after any forward that wrote an LSE: log-diagonal, previous-token and sink weights.

    Each lookup re-evaluates one score and reads its weight as ``exp(s - lse)``; positions are runtime
    arguments, so any sink positions work without recompiling. Alignment and masking are those of
    [`response_attention`][flashstats_kernels.response_attention], whose arguments of the same name this
    takes.

    Args:
        q: [B, Hq, R, D]. queries of the response rows.
        k: [B, Hkv, L, D]. keys.
        lse: [B, Hq, R] float32. the natural-log LSE of the same rows (e.g. ``response_attention(...).lse``).
        sink_positions: tuple of ``S`` ints shared by the batch, or [B, S] integer tensor. key positions to
            read; a position outside ``[0, L)`` or not visible reads 0.
        diag_eps: ``diag_log`` is clamped below at ``log(diag_eps)``.
        key_mask: [B, L] bool or None.
        prompt_len: int, [B] integer tensor, or None (``L - R``). ``prev_weight`` is 0 on rows with
            ``p_i <= prompt_len[b]``.
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap or None.
        window: sliding window or None.
        backend: ``"triton"``, ``"torch"`` or ``"auto"``.

    Returns:
        LookupStats: ``diag_log`` and ``prev_weight`` [B, Hq, R], ``sink_weights`` [B, Hq, R, S], float32.

    Raises:
        ValueError: a shape, size, device or option value that is not supported.
        TypeError: an argument of the wrong type or dtype.

    Shape:
        - q: ``[B, Hq, R, D]``, k: ``[B, Hkv, L, D]``, lse: ``[B, Hq, R]``, sink_positions: ``[B, S]``.
        - diag_log, prev_weight: ``[B, Hq, R]``; sink_weights: ``[B, Hq, R, S]``.
    """
    problem = check_problem(
        q, k, None, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    lse = check_lse(lse, problem.batch, problem.q_heads, problem.rows, q.device)
    eps = _check_diag_eps(diag_eps)
    sinks = normalize_sink_positions(sink_positions, problem.batch, q.device)
    ops = _ops(resolve_backend(backend, q))
    return ops.lookups(q, k, lse.float(), sink_positions=sinks, diag_eps=eps, **_options(problem))


def response_columns(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    backend: str = "auto",
) -> ColumnStats:
    """T3 column sums and means over response rows, after any forward that wrote an LSE.

    A second, key-major pass re-evaluates every score of the response block. A response row counts iff
    ``p_i >= prompt_len[b]``, the token at ``p_i`` is real and the row sees at least one key. The result
    is bitwise identical across runs (no atomics).

    Args:
        q: [B, Hq, R, D]. queries of the response rows.
        k: [B, Hkv, L, D]. keys.
        lse: [B, Hq, R] float32. the natural-log LSE of the same rows.
        key_mask: [B, L] bool or None.
        prompt_len: int, [B] integer tensor, or None (``L - R``).
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap or None.
        window: sliding window or None.
        backend: ``"triton"``, ``"torch"`` or ``"auto"``.

    Returns:
        ColumnStats: ``sum`` (``c_j``) and ``mean`` (``c_j`` over the counted rows that see key ``j``, 0 when
        none), [B, Hq, L] float32.

    Raises:
        ValueError: a shape, size, device or option value that is not supported.
        TypeError: an argument of the wrong type or dtype.

    Shape:
        - q: ``[B, Hq, R, D]``, k: ``[B, Hkv, L, D]``, lse: ``[B, Hq, R]``; sum, mean: ``[B, Hq, L]``.
    """
    problem = check_problem(
        q, k, None, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    lse = check_lse(lse, problem.batch, problem.q_heads, problem.rows, q.device)
    ops = _ops(resolve_backend(backend, q))
    return ops.columns(q, k, lse.float(), **_options(problem))
