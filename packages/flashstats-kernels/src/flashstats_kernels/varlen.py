"""Packed (variable-length) response attention, in the convention of FlashAttention's varlen functions.

Sequences of different lengths sit one after another on a single token axis, without padding;
``cu_seqlens_q`` and ``cu_seqlens_k`` give where each begins. The Triton kernels read each sequence's
offsets from a small table (one launch for the whole batch); the PyTorch backend runs the dense ops
sequence by sequence, which is also the readable reference of what a packed call computes.
"""

from __future__ import annotations

import dataclasses

import torch

from flashstats_kernels._problem import (
    MAX_HEAD_DIM,
    Problem,
    Varlen,
    _check_tensor,
    check_options,
    normalize_sink_positions,
)
from flashstats_kernels.api import _check_request, _ops, _options, resolve_backend
from flashstats_kernels.types import AttentionResult, ColumnStats, LookupStats, RowStats, StatsRequest


def response_attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    seqused_q: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
    request: StatsRequest = StatsRequest(),  # noqa: B008 (frozen dataclass)
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    backend: str = "auto",
) -> AttentionResult:
    """[`response_attention`][flashstats_kernels.response_attention] of ``N`` packed sequences, in one call.

    Sequence ``b`` owns query rows ``cu_seqlens_q[b] <= t < cu_seqlens_q[b] + R_b`` and keys
    ``cu_seqlens_k[b] <= t < cu_seqlens_k[b] + L_b``, with ``R_b = cu_seqlens_q[b + 1] - cu_seqlens_q[b]``
    (or ``seqused_q[b]``) and ``L_b`` likewise. Within a sequence everything is as in a dense call: its
    rows are the last ``R_b`` of its ``L_b`` positions (bottom-right causal alignment), positions,
    windows, prompt lengths and sink positions count from the sequence's first key, and no key of
    another sequence is visible. The result of sequence ``b`` equals a dense call on its slices.

    Args:
        q: [TQ, Hq, D]. queries of the response rows of every sequence; any strides.
        k: [TK, Hkv, D] q's dtype. keys of every sequence; ``Hq % Hkv == 0``.
        v: [TK, Hkv, D] q's dtype. values.
        cu_seqlens_q: [N + 1] int32/int64. ``cu_seqlens_q[b]`` is the first row of sequence ``b``.
        cu_seqlens_k: [N + 1] int32/int64. ``cu_seqlens_k[b]`` is the first key of sequence ``b``.
        max_seqlen_q: an upper bound of every ``R_b`` (the kernels' grid is sized by it).
        max_seqlen_k: an upper bound of every ``L_b``.
        seqused_q: [N] integer or None. use only the first ``seqused_q[b]`` rows of each sequence's
            slot (rows left out read as rows that see no key: ``out`` 0, ``lse`` ``-inf``, statistics 0).
        seqused_k: [N] integer or None. use only the first ``seqused_k[b]`` keys of each slot (the
            column statistics of the others are 0).
        request: statistic families, as in [`response_attention`][flashstats_kernels.response_attention].
            Tuple sink positions count from each sequence's first key; a tensor is ``[N, S]``.
        key_mask: [TK] bool or None. False marks a key that no row sees (e.g. padding inside a sequence).
        prompt_len: int (every sequence), [N] integer tensor, or None (``L_b - R_b``).
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window, or None.
        backend: ``"triton"``, ``"torch"`` (dense ops sequence by sequence) or ``"auto"``.

    Returns:
        AttentionResult: ``out`` [TQ, Hq, D] in q's dtype; ``lse`` and every row statistic [Hq, TQ]
        float32 (FlashAttention's ``softmax_lse`` layout); ``lookups.sink_weights`` [Hq, TQ, S];
        ``columns.sum`` / ``columns.mean`` [Hq, TK].

    Raises:
        ValueError: a shape, size, device or option value that is not supported.
        TypeError: an argument of the wrong type or dtype.

    Offsets on the CPU are checked (monotone, in range, ``R_b <= L_b``, lengths within the maxima)
    and moved to q's device; offsets already on a CUDA device are used as they are, without a host
    read, as FlashAttention does. The Triton backend launches through the registered ``torch.library``
    ops, so ``torch.compile(fullgraph=True)`` traces a packed call as one graph (the host checks are
    skipped while compiling) and, with offsets on the device, a CUDA graph can capture it. The PyTorch
    backend loops over the sequences on the host and breaks a compiled graph.
    """
    problem, varlen = check_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=seqused_q,
        seqused_k=seqused_k, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap,
        window=window,
    )  # fmt: skip
    request = _check_request(request)
    q4, k4, v4 = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))  # [1, H, T, D] views
    sinks = None
    if request.lookups:
        sinks = normalize_sink_positions(request.sink_positions, varlen.batch, q.device)
    if resolve_backend(backend, q) == "torch":
        result = _per_sequence(q4, k4, v4, problem, varlen, request, sinks)
    else:
        ops, options = _ops("triton"), _options(problem)
        out, lse, rows = ops.forward(q4, k4, v4, rows=request.rows, varlen=varlen, **options)
        result = AttentionResult(out=out, lse=lse, rows=rows)
        if request.lookups:
            result.lookups = ops.lookups(
                q4, k4, lse, sink_positions=sinks, diag_eps=request.diag_eps, varlen=varlen, **options
            )
        if request.columns:
            result.columns = ops.columns(q4, k4, lse, varlen=varlen, **options)
    return _unbatched(result)


def _unbatched(result: AttentionResult) -> AttentionResult:
    """Drops the batch axis of one: ``out`` to ``[TQ, Hq, D]``, everything else to ``[Hq, ...]``."""

    def drop(part):
        if part is None:
            return None
        return type(part)(*(getattr(part, f.name)[0] for f in dataclasses.fields(part)))

    return AttentionResult(
        out=result.out[0].transpose(0, 1),
        lse=result.lse[0],
        rows=drop(result.rows),
        lookups=drop(result.lookups),
        columns=drop(result.columns),
    )


def _check_offsets(name: str, x: object, n: int | None, device: torch.device) -> torch.Tensor:
    x = _check_tensor(name, x, 1, "[N + 1]" if n is None else f"[N = {n}]")
    if x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be an int32 or int64 tensor, got {x.dtype}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} must have shape [N] = [{n}], got {tuple(x.shape)}")
    if x.device.type != "cpu" and x.device != device:
        raise ValueError(f"{name} must be on the CPU or on q's device {device}, got {x.device}")
    return x


def _check_max(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name} must be an int >= 0, got {value!r}")
    return value


def _check_3d(q: object, k: object, v: object) -> None:
    q = _check_tensor("q", q, 3, "[TQ, Hq, D]")
    k = _check_tensor("k", k, 3, "[TK, Hkv, D]")
    v = _check_tensor("v", v, 3, "[TK, Hkv, D]")
    hq, d = q.shape[1], q.shape[2]
    if k.shape[2] != d or v.shape != k.shape:
        raise ValueError(f"k and v must have shape [TK, Hkv, D={d}], got {tuple(k.shape)}, {tuple(v.shape)}")
    if hq < 1 or d < 1 or k.shape[1] < 1 or hq % k.shape[1] != 0:
        raise ValueError(f"Hq ({hq}) must be a positive multiple of Hkv ({k.shape[1]}), D >= 1")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim D must be <= {MAX_HEAD_DIM}, got {d}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {x.device}")


def check_varlen(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, seqused_q, seqused_k, key_mask,
    prompt_len, scale, softcap, window,
) -> tuple[Problem, Varlen]:  # fmt: skip
    """Validates a packed call: the options as a `Problem` (``B = 1``) and the sequence table."""
    _check_3d(q, k, v)
    (tq, hq, d), (tk, hkv) = q.shape, k.shape[:2]
    device = q.device
    cu_q = _check_offsets("cu_seqlens_q", cu_seqlens_q, None, device)
    n = cu_q.shape[0] - 1
    if n < 0:
        raise ValueError("cu_seqlens_q must have N + 1 >= 1 entries")
    cu_k = _check_offsets("cu_seqlens_k", cu_seqlens_k, n + 1, device)
    max_q, max_k = _check_max("max_seqlen_q", max_seqlen_q), _check_max("max_seqlen_k", max_seqlen_k)
    used_q = cu_q[1:] - cu_q[:-1] if seqused_q is None else _check_offsets("seqused_q", seqused_q, n, device)
    used_k = cu_k[1:] - cu_k[:-1] if seqused_k is None else _check_offsets("seqused_k", seqused_k, n, device)
    cols = [x.to(device=device, dtype=torch.int64) for x in (cu_q[:-1], used_q, cu_k[:-1], used_k)]
    table = torch.stack(cols, dim=1).contiguous()  # [N, 4]
    on_host = (
        all(x.device.type == "cpu" for x in (cu_q, cu_k, used_q, used_k))
        and not torch.compiler.is_compiling()
    )
    if on_host:
        _check_table(cu_q, cu_k, used_q, used_k, tq, tk, max_q, max_k)
    scale_f, softcap_f, window_i = check_options(scale, softcap, window, d)
    if key_mask is not None:
        key_mask = _check_tensor("key_mask", key_mask, 1, "[TK]")
        if key_mask.dtype != torch.bool or key_mask.shape[0] != tk or key_mask.device != device:
            raise ValueError(
                f"key_mask must be a [TK] = [{tk}] bool tensor on {device}, got {key_mask.dtype} "
                f"{tuple(key_mask.shape)} on {key_mask.device}"
            )
        key_mask = key_mask[None]
    plen = _prompt_len(prompt_len, table, used_k if on_host else None)
    problem = Problem(
        batch=1, q_heads=hq, kv_heads=hkv, rows=tq, keys=tk, head_dim=d, scale=scale_f, softcap=softcap_f,
        window=window_i, key_mask=key_mask, prompt_len=plen,
    )  # fmt: skip
    # Rows (keys) that no sequence covers read as rows that see no key (keys no row sees). Offsets on
    # the host tell whether there are any; offsets on the device are not read, so the launch assumes so.
    full_rows = on_host and seqused_q is None and int(cu_q[0]) == 0 and int(cu_q[-1]) == tq
    full_keys = on_host and seqused_k is None and int(cu_k[0]) == 0 and int(cu_k[-1]) == tk
    return problem, Varlen(table, max_q, max_k, full_rows=full_rows, full_keys=full_keys)


def _check_table(cu_q, cu_k, used_q, used_k, tq, tk, max_q, max_k) -> None:
    """Host checks of the offsets: monotone, in range, ``R_b <= L_b``, within the maxima."""
    for name, cu, used, total in (("q", cu_q, used_q, tq), ("k", cu_k, used_k, tk)):
        if bool((cu[1:] < cu[:-1]).any()) or int(cu[0]) < 0 or int(cu[-1]) > total:
            raise ValueError(
                f"cu_seqlens_{name} must be non-decreasing offsets in [0, {total}], got {cu.tolist()}"
            )
        if bool((used < 0).any() or (used > cu[1:] - cu[:-1]).any()):
            raise ValueError(f"seqused_{name} must lie in [0, slot length], got {used.tolist()}")
    if bool((used_q > used_k).any()):
        raise ValueError(
            f"every sequence needs R_b <= L_b (rows are the last R_b of L_b positions), got R = "
            f"{used_q.tolist()}, L = {used_k.tolist()}"
        )
    if used_q.numel() and (int(used_q.max()) > max_q or int(used_k.max()) > max_k):
        raise ValueError(
            f"max_seqlen_q / max_seqlen_k ({max_q}, {max_k}) must bound the sequence lengths "
            f"({int(used_q.max())}, {int(used_k.max())})"
        )


def _prompt_len(prompt_len: object, table: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
    """``[N] int64``: None -> ``L_b - R_b``; an int for every sequence; an ``[N]`` integer tensor.

    Each value must lie in ``[0, L_b]``, as in a dense call: checked when ``keys`` (the ``L_b`` on the
    host) is given and ``prompt_len`` is an int or a CPU tensor, clamped on the device otherwise.
    """
    n = table.shape[0]
    if prompt_len is None:
        return table[:, 3] - table[:, 1]
    if isinstance(prompt_len, int) and not isinstance(prompt_len, bool):
        if prompt_len < 0:
            raise ValueError(f"prompt_len must be >= 0, got {prompt_len}")
        plen = torch.full((n,), prompt_len, dtype=torch.int64)
    elif not isinstance(prompt_len, torch.Tensor) or prompt_len.dtype.is_floating_point:
        raise TypeError(f"prompt_len must be None, an int or an [N] integer tensor, got {prompt_len!r}")
    elif prompt_len.dtype == torch.bool or tuple(prompt_len.shape) != (n,):
        raise ValueError(f"prompt_len tensor must be an [N] = [{n}] integer tensor, got {prompt_len.dtype}")
    else:
        plen = prompt_len
    checked = keys is not None and plen.device.type == "cpu"
    if keys is not None and checked:
        bad = (plen < 0) | (plen > keys)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"prompt_len must lie in [0, L_b] for every sequence, got {int(plen[b])} for sequence {b} "
                f"of L_b = {int(keys[b])} keys"
            )
    plen = plen.to(device=table.device, dtype=torch.int64)
    return plen if checked else torch.minimum(plen.clamp(min=0), table[:, 3])


def _per_sequence(q4, k4, v4, problem, varlen, request, sinks) -> AttentionResult:
    """The PyTorch backend: the dense ops on each sequence's slices, written into packed buffers."""
    ops = _ops("torch")
    hq, tq, tk, dev = problem.q_heads, problem.rows, problem.keys, q4.device
    out = torch.zeros(tq, hq, q4.shape[-1], dtype=q4.dtype, device=dev).permute(1, 0, 2)[None]
    zeros = lambda *shape: torch.zeros(1, hq, *shape, dtype=torch.float32, device=dev)  # noqa: E731
    lse = torch.full((1, hq, tq), float("-inf"), device=dev)
    rows = RowStats(*(zeros(tq) for _ in range(5))) if request.rows else None
    lookups = columns = None
    if request.lookups:
        eps = torch.tensor(request.diag_eps, dtype=torch.float64).log().item()
        lookups = LookupStats(zeros(tq).fill_(eps), zeros(tq), zeros(tq, sinks.shape[1]))
    if request.columns:
        columns = ColumnStats(zeros(tk), zeros(tk))
    for b, (q0, r, k0, n_keys) in enumerate(varlen.table.tolist()):
        if r == 0:
            continue
        qs, ks = slice(q0, q0 + r), slice(k0, k0 + n_keys)
        options = {
            **_options(problem),
            "key_mask": None if problem.key_mask is None else problem.key_mask[:, ks],
            "prompt_len": problem.prompt_len[b : b + 1],
        }
        o, lse[..., qs], part = ops.forward(
            q4[:, :, qs], k4[:, :, ks], v4[:, :, ks], rows=request.rows, **options
        )
        out[:, :, qs] = o
        _write(rows, part, (qs,))
        if request.lookups:
            got = ops.lookups(
                q4[:, :, qs], k4[:, :, ks], lse[..., qs], sink_positions=sinks[b : b + 1],
                diag_eps=request.diag_eps, **options,
            )  # fmt: skip
            _write(lookups, got, (qs,))
        if request.columns:
            _write(columns, ops.columns(q4[:, :, qs], k4[:, :, ks], lse[..., qs], **options), (ks,))
    return AttentionResult(out=out, lse=lse, rows=rows, lookups=lookups, columns=columns)


def _write(into, part, index: tuple[slice, ...]) -> None:
    """Copies every field of one sequence's dataclass of statistics into the packed buffers."""
    if into is None:
        return
    for f in dataclasses.fields(into):
        getattr(into, f.name)[(slice(None), slice(None), *index)] = getattr(part, f.name)


__all__ = ["response_attention_varlen"]
