"""Typed statistic tensors: the contract between flashstats packages.

Shapes use ``B`` batch, ``Hq`` query heads, ``R`` response rows (the last ``R`` positions of a
sequence of ``L`` tokens), ``L`` keys, ``S`` sink positions, ``D`` head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StatsRequest:
    """Which statistic families one call computes (each is a compile-time kernel flag).

    With every family off the call is a plain attention forward (the paper's "Base").
    """

    rows: bool = True
    """T1: fused row statistics (entropy, normalized entropy, prompt mass, max weight, effective support)."""
    lookups: bool = False
    """T2: post-pass lookups from the stored LSE (log-diagonal, previous-token weight, sink weights)."""
    columns: bool = False
    """T3: key-major column sums and means over response rows."""
    sink_positions: tuple[int, ...] | torch.Tensor = (0,)
    """Key positions whose weights T2 reads: a tuple of ``S`` ints shared by the batch, or a
    ``[B, S]`` int64 tensor with positions per batch element (e.g. the first non-padded key)."""
    diag_eps: float = 1e-30
    """``diag_log`` is clamped below at ``log(diag_eps)``."""


@dataclass
class RowStats:
    """T1 statistics, one value per response row. Each field: ``[B, Hq, R] float32``."""

    entropy: torch.Tensor
    """``-sum_j p_ij log p_ij`` in nats."""
    normalized_entropy: torch.Tensor
    """``entropy / log(n_i)`` with ``n_i`` visible keys; 0 when ``n_i <= 1``."""
    prompt_mass: torch.Tensor
    """``sum_{j < prompt_len} p_ij``."""
    max_weight: torch.Tensor
    """``max_j p_ij``."""
    effective_support: torch.Tensor
    """``1 / sum_j p_ij^2``."""


@dataclass
class LookupStats:
    """T2 statistics read after the pass from Q, K and the stored LSE."""

    diag_log: torch.Tensor
    """``[B, Hq, R] float32``: ``log p_ii`` (the row's own position), clamped at ``log(diag_eps)``."""
    prev_weight: torch.Tensor
    """``[B, Hq, R] float32``: ``p_{i,i-1}``; 0 on the first response row."""
    sink_weights: torch.Tensor
    """``[B, Hq, R, S] float32``: weight on each requested sink position (0 where not visible)."""


@dataclass
class ColumnStats:
    """T3 column reductions over response rows."""

    sum: torch.Tensor
    """``[B, Hq, L] float32``: ``c_j = sum_i p_ij`` over response rows."""
    mean: torch.Tensor
    """``[B, Hq, L] float32``: ``c_j / (number of response rows that see key j)`` (0 when none)."""


@dataclass
class AttentionResult:
    """What [`flashstats_kernels.response_attention`][] returns."""

    out: torch.Tensor
    """``[B, Hq, R, D]`` in the dtype of ``q``: the attention output of the response rows."""
    lse: torch.Tensor
    """``[B, Hq, R] float32``: natural-log log-sum-exp of each row's scaled (soft-capped) scores."""
    rows: RowStats | None = None
    """T1 row statistics, ``[B, Hq, R] float32`` each, when ``request.rows`` (else None)."""
    lookups: LookupStats | None = None
    """T2 lookups from the stored LSE when ``request.lookups`` (else None)."""
    columns: ColumnStats | None = None
    """T3 column sums and means, ``[B, Hq, L] float32``, when ``request.columns`` (else None)."""
