"""Readable PyTorch reference of the logit statistics (the CPU path, and the Triton kernels' reference)."""

from __future__ import annotations

import torch


def naive_logit_statistics(logits: torch.Tensor, targets: torch.Tensor, top: int) -> torch.Tensor:
    """``[N, 6 + top] float32``: six scalars and the ``top`` largest probabilities of each distribution.

    Columns: ``log q(y)``, ``1 + #{v : q(v) > q(y)}`` (counted on the logits, exact), the entropy
    (nats), ``q^(1) - q^(2)``, ``sum_{r <= 5} q^(r)``, ``log q^(1) - log q(y)``, then
    ``q^(1) .. q^(top)`` (0 past the vocabulary), where ``q = softmax(logits)`` in fp32 and ``y`` the
    target.

    Args:
        logits: [N, V] any float dtype, ``V >= 5``.
        targets: [N] int64 in ``[0, V)``.
        top: ranked probabilities kept, ``>= 5``.
    """
    x = logits.float()
    logp = torch.log_softmax(x, dim=-1)  # [N, V]
    answer = logp.gather(1, targets[:, None])[:, 0]  # [N]
    # the order of the logits is the order of the probabilities (log-probabilities can tie by rounding)
    rank = 1.0 + (x > x.gather(1, targets[:, None])).sum(dim=-1).float()
    probs = logp.exp()
    entropy = -torch.where(probs > 0, probs * logp, 0.0).sum(dim=-1)
    k = min(top, logits.shape[1])
    best = logp.topk(k, dim=-1).values  # [N, k] log-probabilities, descending
    best_p = best.exp()
    ranked = torch.nn.functional.pad(best_p, (0, top - k))  # [N, top]
    stats = (
        answer,
        rank,
        entropy,
        best_p[:, 0] - best_p[:, 1],
        best_p[:, :5].sum(dim=-1),
        best[:, 0] - answer,
    )
    return torch.cat([torch.stack(stats, dim=-1), ranked], dim=-1)
