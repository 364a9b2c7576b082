"""Seven per-token statistics of the next-token distribution at the positions that predict answer tokens.

Let ``q_t`` be the model's next-token distribution at the position that predicts answer token
``y_t`` and ``q_t^(r)`` its ``r``-th largest probability. In the order of
[`LOGIT_STAT_NAMES`][flashstats_hf.LOGIT_STAT_NAMES]:

- ``answer_logprob``: ``log q_t(y_t)``, the teacher-forced log-likelihood of the answer token
  (higher: the model finds the token more plausible).
- ``answer_rank``: ``1 + #{v : q_t(v) > q_t(y_t)}`` (1 when the answer token is the top choice; higher:
  the model would not have produced it).
- ``entropy``: ``-sum_v q_t(v) log q_t(v)`` in nats (higher: the model is less certain what comes next).
- ``top1_prob``: ``q_t^(1)`` (higher: more confident, whatever the answer says).
- ``top1_top2_margin``: ``q_t^(1) - q_t^(2)`` (higher: the top choice is less contested).
- ``top5_mass``: ``sum_{r <= 5} q_t^(r)`` (higher: the distribution is concentrated on few tokens).
- ``top1_answer_gap``: ``log q_t^(1) - log q_t(y_t) >= 0`` (0 when the answer token is the top choice;
  higher: the answer diverges from what the model would have said).
"""

from __future__ import annotations

import torch

LOGIT_STAT_NAMES: tuple[str, ...] = (
    "answer_logprob",
    "answer_rank",
    "entropy",
    "top1_prob",
    "top1_top2_margin",
    "top5_mass",
    "top1_answer_gap",
)
"""Names of the logit statistics, in the order of the last axis of ``ForwardStats.logit_stats``."""


def logit_statistics(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token statistics of the next-token distributions (see the module docstring).

    Args:
        logits: [N, V] any float dtype. Next-token logits (after any final soft-capping).
        targets: [N] int64. The token that follows each position (the answer token).

    Returns:
        ``[N, 7] float32``, columns in the order of [`LOGIT_STAT_NAMES`][flashstats_hf.LOGIT_STAT_NAMES].

    Shape:
        - logits: ``[N, V]`` with ``V >= 5``; targets: ``[N]``; output: ``[N, 7]``.
    """
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"expected logits [N, V] and targets [N], got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    if logits.shape[1] < 5:
        raise ValueError(f"expected a vocabulary of at least 5 tokens, got {logits.shape[1]}")
    logp = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    answer = logp.gather(1, targets[:, None])[:, 0]  # [N]
    rank = 1.0 + (logp > answer[:, None]).sum(dim=-1).float()
    probs = logp.exp()
    entropy = -torch.where(probs > 0, probs * logp, 0.0).sum(dim=-1)
    top = logp.topk(5, dim=-1).values  # [N, 5] log-probabilities, descending
    top_p = top.exp()
    stats = (
        answer,
        rank,
        entropy,
        top_p[:, 0],
        top_p[:, 0] - top_p[:, 1],
        top_p.sum(dim=-1),
        top[:, 0] - answer,
    )
    return torch.stack(stats, dim=-1)
