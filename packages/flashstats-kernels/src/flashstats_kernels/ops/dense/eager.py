"""T4 dense: the materialised response block, in eager PyTorch.

What needs the whole map (attention maps of chosen heads, row top-k mass, graph features) reads it here.
[`dense_statistics`][flashstats_kernels.dense_statistics] is also the baseline "dense pipeline" that
``output_attentions`` detectors pay for: an fp32 softmax cast to ``prob_dtype``, then every statistic by
reductions over the rounded weights.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from flashstats_kernels._problem import check_problem, device_ints, normalize_sink_positions
from flashstats_kernels.ops.columns.naive import naive_counted_rows
from flashstats_kernels.ops.forward.naive import naive_visibility
from flashstats_kernels.types import AttentionResult, ColumnStats, LookupStats, RowStats, StatsRequest


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, softcap: float | None) -> torch.Tensor:
    """[B, H, R, L] float32 scores; ``k`` already has one head per query head (a broadcast view)."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return s


def _softmax(s: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Masked fp32 softmax; a row that sees no key is all zeros."""
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.where(visible.any(-1, keepdim=True), p, 0.0)


def _head_index(
    heads: Sequence[int] | torch.Tensor | None, q_heads: int, device: torch.device
) -> torch.Tensor:
    """``[H'] int64`` query-head indices on ``device``, range-checked unless they already live on a GPU."""
    if heads is None:
        return torch.arange(q_heads, device=device)
    bad = f"heads must be None or a 1-D sequence of query-head indices, got {heads!r}"
    if isinstance(heads, (str, bytes)):
        raise TypeError(bad)
    if isinstance(heads, Sequence):
        if not all(isinstance(h, numbers.Integral) and not isinstance(h, bool) for h in heads):
            raise TypeError(bad)
        if any(not 0 <= h < q_heads for h in heads):
            raise ValueError(f"heads must lie in [0, Hq={q_heads}), got {list(heads)}")
        return device_ints([int(h) for h in heads], device)  # fill kernels while a CUDA graph is captured
    try:
        idx = torch.as_tensor(heads)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(bad) from None
    if idx.dim() != 1 or idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise TypeError(bad)
    if idx.device.type == "cpu" and idx.numel() and (bool((idx < 0).any()) or bool((idx >= q_heads).any())):
        raise ValueError(f"heads must lie in [0, Hq={q_heads}), got {idx.tolist()}")
    return idx.to(device=device, dtype=torch.int64)


def dense_response_block(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    window: int | None = None,
    heads: Sequence[int] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Materialises the attention weights of the response rows for a chosen set of query heads (T4).

    Alignment and masking are those of [`flashstats_kernels.response_attention`][] (bottom-right
    causal mask, ``key_mask``, ``window``, ``softcap``). Memory is ``B * H' * R * L`` float32 values.

    Args:
        q: [B, Hq, R, D]. queries of the response rows.
        k: [B, Hkv, L, D]. keys.
        key_mask: [B, L] bool or None. True marks a real token.
        prompt_len: int, [B] integer tensor or None. validated like everywhere else; the weights do not
            depend on it (it only splits keys into prompt and response).
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap or None.
        window: sliding window or None.
        heads: query heads to materialise (None: all ``Hq``).

    Returns:
        [B, H', R, L] float32 weights; 0 on keys a row does not see, and on every key of a row that sees none.

    Shape:
        q: ``[B, Hq, R, D]``, k: ``[B, Hkv, L, D]`` -> ``[B, H', R, L]`` with ``H' = len(heads)``.
    """
    problem = check_problem(
        q, k, None, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    idx = _head_index(heads, problem.q_heads, q.device)
    s = _scores(
        q.index_select(1, idx), k.index_select(1, idx // problem.group), problem.scale, problem.softcap
    )
    vis = naive_visibility(
        problem.batch,
        problem.rows,
        problem.keys,
        key_mask=problem.key_mask,
        window=problem.window,
        device=q.device,
    )
    return _softmax(s, vis)


def row_topk_mass(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Total weight of the ``k`` largest weights of each row (T4: needs ``O(k)`` state per row).

    Args:
        probs: [B, H, R, L] float. weights from
            [`dense_response_block`][flashstats_kernels.dense_response_block].
        k: number of weights per row, ``1 <= k``; ``k > L`` sums the whole row.

    Returns:
        [B, H, R] float32.
    """
    if not isinstance(probs, torch.Tensor) or probs.dim() != 4:
        raise ValueError("probs must be a [B, H, R, L] tensor")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    return probs.float().topk(min(k, probs.shape[-1]), dim=-1).values.sum(-1)


def _dense_rows(p: torch.Tensor, visible: torch.Tensor, is_prompt: torch.Tensor) -> RowStats:
    """T1 statistics by reductions over the materialised (rounded) weights, in their dtype."""
    n = visible.sum(-1).to(p.dtype)
    log_p = torch.where(p > 0, torch.log(torch.where(p > 0, p, 1)), 0)
    entropy = -(p * log_p).sum(-1)
    normalized = torch.where(n > 1, entropy / torch.log(torch.where(n > 1, n, 2)), 0)
    sum_sq = (p * p).sum(-1)
    effective = torch.where(sum_sq > 0, 1 / torch.where(sum_sq > 0, sum_sq, 1), 0)
    return RowStats(
        entropy=entropy.float(),
        normalized_entropy=normalized.float(),
        prompt_mass=(p * is_prompt).sum(-1).float(),
        max_weight=p.amax(-1).float(),
        effective_support=effective.float(),
    )


def _dense_lookups(
    p: torch.Tensor, prompt_len: torch.Tensor, sinks: torch.Tensor, diag_eps: float
) -> LookupStats:
    b, h, r, seq = p.shape
    rows = torch.arange(r, device=p.device)
    pos = seq - r + rows
    diag = p[:, :, rows, pos]
    diag_log = torch.where(diag > 0, torch.log(torch.where(diag > 0, diag, 1)), -math.inf).float()
    prev = torch.where(
        (pos[None, :] > prompt_len[:, None])[:, None], p[:, :, rows, (pos - 1).clamp(min=0)], 0
    )
    idx = sinks.clamp(0, seq - 1)[:, None, None, :].expand(b, h, r, sinks.shape[1])
    in_range = ((sinks >= 0) & (sinks < seq))[:, None, None, :]
    sink_weights = torch.where(in_range, torch.gather(p, 3, idx), 0)
    return LookupStats(
        diag_log=diag_log.clamp(min=math.log(diag_eps)),
        prev_weight=prev.float(),
        sink_weights=sink_weights.float(),
    )


def dense_statistics(
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
    prob_dtype: torch.dtype = torch.bfloat16,
) -> AttentionResult:
    """The dense baseline: materialise the weights, round them to ``prob_dtype``, reduce in PyTorch.

    This is the path of detectors that read ``output_attentions``: an fp32 softmax over the response
    block cast to ``prob_dtype`` (bf16 by default), then every statistic by reductions over the rounded
    weights in that dtype. Same arguments and result as [`flashstats_kernels.response_attention`][];
    ``out`` is the rounded weights times V, ``lse`` the fp32 log-sum-exp. Memory is ``O(B * Hq * R * L)``.

    Args:
        q: [B, Hq, R, D]. queries of the response rows.
        k: [B, Hkv, L, D]. keys.
        v: [B, Hkv, L, D]. values.
        request: which statistic families to compute.
        key_mask: [B, L] bool or None.
        prompt_len: int, [B] integer tensor, or None (``L - R``).
        scale: score scale, default ``1 / sqrt(D)``.
        softcap: soft cap or None.
        window: sliding window or None.
        prob_dtype: dtype the weights are rounded to before the reductions.

    Returns:
        AttentionResult with float32 statistics (``out`` in q's dtype).

    Shape:
        As [`flashstats_kernels.response_attention`][].
    """
    problem = check_problem(
        q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    g, seq = problem.group, problem.keys
    s = _scores(q, k.repeat_interleave(g, dim=1), problem.scale, problem.softcap)
    vis = naive_visibility(
        problem.batch, problem.rows, seq, key_mask=problem.key_mask, window=window, device=q.device
    )
    lse = torch.logsumexp(s.masked_fill(~vis, float("-inf")), dim=-1)
    p = _softmax(s, vis).to(prob_dtype)
    out = torch.matmul(p, v.repeat_interleave(g, dim=1).to(prob_dtype)).to(q.dtype)
    result = AttentionResult(out=out, lse=lse)
    is_prompt = torch.arange(seq, device=q.device)[None, :] < problem.prompt_len[:, None]
    if request.rows:
        result.rows = _dense_rows(p, vis, is_prompt[:, None, None, :])
    if request.lookups:
        sinks = normalize_sink_positions(request.sink_positions, problem.batch, q.device)
        result.lookups = _dense_lookups(p, problem.prompt_len, sinks, request.diag_eps)
    if request.columns:
        counted = naive_counted_rows(vis, key_mask=problem.key_mask, prompt_len=problem.prompt_len)
        total = (p * counted[:, None, :, None]).sum(2)
        seen_by = (vis[:, 0] & counted[:, :, None]).sum(1)[:, None, :]
        mean = torch.where(seen_by > 0, total / seen_by.clamp(min=1).to(p.dtype), 0)
        result.columns = ColumnStats(sum=total.float(), mean=mean.float())
    return result
