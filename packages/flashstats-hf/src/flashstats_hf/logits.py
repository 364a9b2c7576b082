"""Seven per-token statistics of the next-token distribution at the positions that predict answer tokens.

Let ``q_t`` be the model's next-token distribution at the position that predicts answer token
``y_t`` and ``q_t^(r)`` its ``r``-th largest probability. Six statistics are scalars and the seventh
is the vector of the top-``TOP_RANKS`` probabilities, one column per rank (the paper's Appendix L.2:
pooled four ways over the answer tokens, these 56 columns give L9's 224 candidates). In the order of
[`LOGIT_STAT_NAMES`][flashstats_hf.LOGIT_STAT_NAMES]:

- ``answer_logprob``: ``log q_t(y_t)``, the teacher-forced log-likelihood of the answer token
  (higher: the model finds the token more plausible).
- ``answer_rank``: ``1 + #{v : q_t(v) > q_t(y_t)}`` (1 when the answer token is the top choice; higher:
  the model would not have produced it).
- ``entropy``: ``-sum_v q_t(v) log q_t(v)`` in nats (higher: the model is less certain what comes next).
- ``top1_top2_margin``: ``q_t^(1) - q_t^(2)`` (higher: the top choice is less contested).
- ``top5_mass``: ``sum_{r <= 5} q_t^(r)`` (higher: the distribution is concentrated on few tokens).
- ``top1_answer_gap``: ``log q_t^(1) - log q_t(y_t) >= 0`` (0 when the answer token is the top choice;
  higher: the answer diverges from what the model would have said).
- ``top_prob_r`` for ``r = 1..TOP_RANKS``: ``q_t^(r)`` (``top_prob_1`` is the top-1 probability); 0 for
  ranks beyond a vocabulary smaller than ``TOP_RANKS``.
"""

from __future__ import annotations

import torch
from flashstats_kernels.api import resolve_backend
from flashstats_kernels.ops.logits import naive_logit_statistics

TOP_RANKS = 50
"""Number of ranked probabilities ``q_t^(1..TOP_RANKS)`` kept per token."""

LOGIT_SCALAR_NAMES: tuple[str, ...] = (
    "answer_logprob",
    "answer_rank",
    "entropy",
    "top1_top2_margin",
    "top5_mass",
    "top1_answer_gap",
)
"""The six scalar logit statistics, the first columns of ``ForwardStats.logit_stats``."""

LOGIT_STAT_NAMES: tuple[str, ...] = LOGIT_SCALAR_NAMES + tuple(
    f"top_prob_{r}" for r in range(1, TOP_RANKS + 1)
)
"""Names of the ``6 + TOP_RANKS`` columns of ``ForwardStats.logit_stats``, in order."""


def logit_statistics(logits: torch.Tensor, targets: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """Per-token statistics of the next-token distributions (see the module docstring).

    Args:
        logits: [N, V] any float dtype. Next-token logits (after any final soft-capping).
        targets: [N] int64. The token that follows each position (the answer token).
        backend: ``"triton"`` (the vocabulary split over many programs: a few rows, as in a decoding
            step, no longer run in one thread block each), ``"torch"`` or ``"auto"`` (Triton on CUDA).

    Returns:
        ``[N, 6 + TOP_RANKS] float32``, columns in the order of
        [`LOGIT_STAT_NAMES`][flashstats_hf.LOGIT_STAT_NAMES].

    Shape:
        - logits: ``[N, V]`` with ``V >= 5``; targets: ``[N]``; output: ``[N, 56]``.
    """
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"expected logits [N, V] and targets [N], got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    if logits.shape[1] < 5:
        raise ValueError(f"expected a vocabulary of at least 5 tokens, got {logits.shape[1]}")
    if logits.is_floating_point() and resolve_backend(backend, logits) == "triton":
        from flashstats_kernels.ops.logits.fused import logit_statistics_triton

        return logit_statistics_triton(logits, targets, TOP_RANKS)
    return naive_logit_statistics(logits, targets, TOP_RANKS)
