"""The readable fp64 reference of every statistic, for checking the fast backends on small inputs."""

from __future__ import annotations

import torch

from flashstats_kernels._problem import check_problem, normalize_sink_positions
from flashstats_kernels.api import _check_request
from flashstats_kernels.ops.columns.naive import naive_columns, naive_columns_from_probs
from flashstats_kernels.ops.forward.naive import naive_forward, naive_probabilities, naive_row_stats
from flashstats_kernels.ops.lookups.naive import naive_lookups, naive_lookups_from_probs
from flashstats_kernels.types import AttentionResult, StatsRequest

__all__ = ["naive_columns", "naive_forward", "naive_lookups", "naive_response_attention"]


def naive_response_attention(
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
) -> AttentionResult:
    """fp64 reference of [`flashstats_kernels.response_attention`][]; materialises the response block.

    Arguments and validation are those of [`flashstats_kernels.response_attention`][]; every
    returned tensor (``out`` too) is float64. Memory is ``O(B * Hq * R * L)``: small inputs only.

    Args:
        q: [B, Hq, R, D]. queries of the last R of L positions.
        k: [B, Hkv, L, D]. keys.
        v: [B, Hkv, L, D]. values.
        request: which statistic families to compute.
        key_mask: [B, L] bool or None. True marks a real token.
        prompt_len: int, [B] integer tensor or None (``L - R``). keys ``j < prompt_len`` are prompt.
        scale: score scale, default ``1/sqrt(D)``.
        softcap: ``c`` of ``c * tanh(s / c)``, or None.
        window: sliding window ``w`` (key j visible from p iff ``p - w < j <= p``), or None.

    Returns:
        AttentionResult of float64 tensors.

    Raises:
        ValueError: a shape, size, device or option value that is not supported.
        TypeError: an argument of the wrong type, or inputs of a dtype that is not a real floating one.

    Shape:
        - out: ``[B, Hq, R, D]``; lse and row statistics: ``[B, Hq, R]``;
          sink_weights: ``[B, Hq, R, S]``; column statistics: ``[B, Hq, L]``.
    """
    problem = check_problem(
        q, k, v, key_mask=key_mask, prompt_len=prompt_len, scale=scale, softcap=softcap, window=window
    )
    request = _check_request(request)
    if not q.dtype.is_floating_point:
        raise TypeError(f"q, k and v must have a real floating dtype, got {q.dtype}")
    s, visible, lse, p = naive_probabilities(
        q, k, key_mask=problem.key_mask, scale=problem.scale, softcap=problem.softcap, window=problem.window
    )
    group = problem.group
    out = torch.einsum("bhrl,bhld->bhrd", p, v.double().repeat_interleave(group, dim=1))
    result = AttentionResult(out=out, lse=lse)
    if request.rows:
        result.rows = naive_row_stats(p, s, lse, visible, problem.prompt_len)
    if request.lookups:
        sinks = normalize_sink_positions(request.sink_positions, problem.batch, q.device)
        result.lookups = naive_lookups_from_probs(
            p, s, lse, visible, prompt_len=problem.prompt_len, sink_positions=sinks, diag_eps=request.diag_eps
        )
    if request.columns:
        result.columns = naive_columns_from_probs(
            p, visible, key_mask=problem.key_mask, prompt_len=problem.prompt_len
        )
    return result
