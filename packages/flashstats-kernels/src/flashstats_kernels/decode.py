"""Public entry point of the decoding op: new rows against a key cache, statistics as the rows arrive."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import torch

from flashstats_kernels._problem import (
    check_key_mask,
    check_options,
    check_qk,
    normalize_prompt_len,
    normalize_sink_positions,
)
from flashstats_kernels.api import _check_request, resolve_backend
from flashstats_kernels.ops.decode.chunked import decode_torch
from flashstats_kernels.state import ColumnState, RowTargets
from flashstats_kernels.types import AttentionResult, StatsRequest


def _check_kv_len(kv_len: object, rows: int, cache: int, device: torch.device) -> torch.Tensor | int:
    """``kv_len`` as an int (checked) or a one-element integer tensor on ``device`` (checked on the CPU)."""
    if isinstance(kv_len, bool) or not isinstance(kv_len, (int, torch.Tensor)):
        raise TypeError(f"kv_len must be an int or a one-element integer tensor, got {type(kv_len).__name__}")
    if isinstance(kv_len, torch.Tensor):
        if kv_len.numel() != 1 or kv_len.is_floating_point() or kv_len.dtype == torch.bool:
            raise TypeError(
                f"kv_len tensor must hold one integer, got {kv_len.dtype} of shape {tuple(kv_len.shape)}"
            )
        if kv_len.device != device:
            raise ValueError(f"kv_len must be on q's device {device}, got {kv_len.device}")
        if kv_len.device.type != "cpu":
            return kv_len  # read on the device (a captured step must not synchronise)
        kv_len = int(kv_len)
    if not rows <= kv_len <= cache:
        raise ValueError(
            f"kv_len must lie in [R, Lc] = [{rows}, {cache}] (the new rows are cached), got {kv_len}"
        )
    return kv_len


def _check_columns(state: object, b: int, hq: int, cache: int, device: torch.device) -> ColumnState:
    if not isinstance(state, ColumnState):
        raise TypeError(
            f"request.columns needs column_state=ColumnState.zeros({b}, {hq}, {cache}, device), "
            f"got {type(state).__name__}"
        )
    if tuple(state.sum.shape) != (b, hq, cache) or tuple(state.count.shape) != (b, cache):
        raise ValueError(
            f"column_state must have sum [B, Hq, Lc] = [{b}, {hq}, {cache}] and count [B, Lc] = "
            f"[{b}, {cache}], "
            f"got {tuple(state.sum.shape)} and {tuple(state.count.shape)}"
        )
    for x in (state.sum, state.count):
        if x.dtype != torch.float32 or x.device != device:
            raise TypeError(f"column_state tensors must be float32 on {device}, got {x.dtype} on {x.device}")
    return state


def _check_targets(
    targets: object, request: StatsRequest, b: int, hq: int, n_sinks: int, device: torch.device
) -> RowTargets:
    """``targets`` checked: a `RowTargets` with a ``[1]`` int64 start and the buffers the request needs."""
    if not isinstance(targets, RowTargets):
        raise TypeError(f"targets must be a RowTargets or None, got {type(targets).__name__}")
    st = targets.start
    if not isinstance(st, torch.Tensor) or st.shape != (1,) or st.dtype != torch.int64 or st.device != device:
        raise TypeError(f"targets.start must be a [1] int64 tensor on {device}")
    need: dict[str, tuple[int, ...]] = {"rows": (5, b, hq)} if request.rows else {}
    if request.lookups:
        need.update(diag_log=(b, hq), prev_weight=(b, hq), sink_weights=(b, hq))
    for name, lead in need.items():
        x = getattr(targets, name)
        ndim = len(lead) + (2 if name == "sink_weights" else 1)
        ok = isinstance(x, torch.Tensor) and x.ndim == ndim and tuple(x.shape[: len(lead)]) == lead
        if not ok or x.dtype != torch.float32 or x.device != device:
            want = [*lead, "A"] + (["S"] if name == "sink_weights" else [])
            raise ValueError(f"targets.{name} must be a float32 tensor {want} on {device} for this request")
        if name == "sink_weights" and x.shape[-1] != n_sinks:
            raise ValueError(f"targets.sink_weights must hold S = {n_sinks} sinks, got {x.shape[-1]}")
    return targets


def _write_targets(res: AttentionResult, targets: RowTargets) -> AttentionResult:
    """Copy the per-row outputs of ``res`` into the target slots (the PyTorch backend's way)."""
    r = res.lse.shape[2]
    slots = targets.start + torch.arange(r, device=res.lse.device)
    if res.rows is not None and targets.rows is not None:
        rows = torch.stack([getattr(res.rows, f.name) for f in dataclasses.fields(res.rows)])
        targets.rows.index_copy_(3, slots, rows)
    if res.lookups is not None:
        for name in ("diag_log", "prev_weight", "sink_weights"):
            getattr(targets, name).index_copy_(2, slots, getattr(res.lookups, name))
    return dataclasses.replace(res, rows=None, lookups=None)


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv_len: int | torch.Tensor,
    request: StatsRequest = StatsRequest(),  # noqa: B008 (frozen dataclass)
    column_state: ColumnState | None = None,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    splits: int | None = None,
    targets: RowTargets | None = None,
    backend: str = "auto",
) -> AttentionResult:
    """Attention and statistics of ``R`` new rows (a decoding step or a chunk) against a key cache.

    The cache holds ``Lc`` slots of which the first ``kv_len`` are written; the new rows are the last
    ``R`` of those (their own keys are already in the cache), so row ``i`` sits at position
    ``kv_len - R + i`` and everything else follows
    [`response_attention`][flashstats_kernels.response_attention] on ``k[:, :, :kv_len]``. T1 and T2 are
    returned per new row; T3 is *accumulated*: the rows' weights are added to ``column_state`` in place (a
    row's weights are final once it is computed), so after the last step ``column_state.stats()`` equals
    [`response_columns`][flashstats_kernels.response_columns] over all the rows of the stream.

    On Triton the keys are split into ``splits`` ranges (flash-decoding) whose partial states are merged
    in a fixed order by the package's merge rule: bitwise identical across runs, and independent of the
    split count up to fp32 rounding. ``kv_len`` may be a device tensor, read by the kernels, so a step
    runs without host synchronisation and can be captured in a CUDA graph.

    Args:
        q: [B, Hq, R, D]. queries of the new rows; any strides.
        k: [B, Hkv, Lc, D] q's dtype. key cache (slots ``>= kv_len`` are ignored); any strides.
        v: [B, Hkv, Lc, D] q's dtype. value cache.
        kv_len: int, or one-element integer tensor on q's device. number of valid keys, ``R <= kv_len <= Lc``.
        request: families to compute. ``columns`` needs ``column_state``; ``lookups`` reads
            ``request.sink_positions`` (cache positions).
        column_state: running column sums and counts ``[B, Hq, Lc]`` / ``[B, Lc]``, updated in place.
        key_mask: [B, Lc] bool or None. True marks a real token.
        prompt_len: int or [B] integer tensor in ``[0, kv_len]``. keys ``j < prompt_len[b]`` are prompt
            keys and rows before it do not count in T3; None means ``kv_len - R`` (only with an int
            ``kv_len``).
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap ``c`` or None.
        window: sliding window or None.
        splits: key splits of the Triton kernel (None: enough to fill the GPU, from the shapes alone).
        targets: write T1 and T2 of row ``i`` into slot ``targets.start + i`` of the caller's buffers
            (a stream's per-token outputs) instead of returning new tensors; see
            [`RowTargets`][flashstats_kernels.RowTargets].
        backend: ``"triton"``, ``"torch"`` or ``"auto"``.

    Returns:
        AttentionResult: ``out`` [B, Hq, R, D], ``lse`` [B, Hq, R], ``rows`` and ``lookups`` as requested
        (None when written into ``targets``); ``columns`` is None (read ``column_state.stats()``).

    Raises:
        ValueError: a shape, size, device or option value that is not supported.
        TypeError: an argument of the wrong type or dtype.

    Shape:
        - q: ``[B, Hq, R, D]``; k, v: ``[B, Hkv, Lc, D]``; out: ``[B, Hq, R, D]``; lse, rows: ``[B, Hq, R]``.
    """
    b, hq, _, r, cache, d = check_qk(q, k, v)
    dev = q.device
    request = _check_request(request)
    scale_f, softcap_f, window_i = check_options(scale, softcap, window, d)
    n = _check_kv_len(kv_len, r, cache, dev)
    if prompt_len is None:
        if not isinstance(n, int):
            raise ValueError("prompt_len is required when kv_len is a device tensor")
        prompt_len = n - r
    # prompt lengths lie in [0, kv_len]: the keys of the cache that exist (a device kv_len bounds by Lc)
    plen = normalize_prompt_len(prompt_len, b, r, n if isinstance(n, int) else cache, dev)
    mask = check_key_mask(key_mask, b, cache, dev)
    state = _check_columns(column_state, b, hq, cache, dev) if request.columns else None
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or splits < 1):
        raise ValueError(f"splits must be None or a positive int, got {splits!r}")
    sinks = normalize_sink_positions(request.sink_positions, b, dev) if request.lookups else None
    if targets is not None:
        targets = _check_targets(targets, request, b, hq, 0 if sinks is None else sinks.shape[1], dev)
    args: dict[str, Any] = dict(
        key_mask=mask, prompt_len=plen, scale=scale_f, softcap=softcap_f, window=window_i, rows=request.rows,
        sink_positions=sinks, diag_eps=request.diag_eps, columns=state, splits=splits,
    )  # fmt: skip
    if resolve_backend(backend, q) == "torch":
        res = decode_torch(q, k, v, kv_len=int(n), **args)
        return res if targets is None else _write_targets(res, targets)
    fused = importlib.import_module("flashstats_kernels.ops.decode.fused")
    if isinstance(n, int):
        n = torch.tensor([n], dtype=torch.int64).to(dev, non_blocking=True)
    return fused.decode_triton(q, k, v, kv_len=n, targets=targets, **args)
