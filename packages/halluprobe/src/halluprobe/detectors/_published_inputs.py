"""The inputs of the published detectors, built from records, and the statistics they score.

The ``*_matrix`` helpers build each detector's ``X`` from [`ExampleRecord`][halluprobe.ExampleRecord]
lists; `mtopdiv` is TOHA's statistic of one head, `rauq_score` RAUQ's of one answer.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree

from halluprobe.features._records import HEAD_STATS, POOLS, ExampleRecord


def _rauq_layers(prob: np.ndarray, weights: np.ndarray, alpha: float) -> float:
    """Max over layers of ``-mean_t log c_t``; ``prob [A]`` (any values), ``weights [NL, A]`` float64."""
    prob = np.clip(prob, 1e-30, 1.0)
    worst = -np.inf
    for w in weights:
        c = np.empty_like(prob)
        c[0] = prob[0]
        for t in range(1, len(prob)):
            c[t] = alpha * prob[t] + (1.0 - alpha) * w[t] * c[t - 1]
        worst = max(worst, float(-np.log(np.clip(c, 1e-30, None)).mean()))
    return worst


def _previous_token_heads(token_prev: np.ndarray) -> np.ndarray:
    """``[NL, A] float64``: per layer, the previous-token weights of the head with the largest mean."""
    prev = np.asarray(token_prev, dtype=np.float64)
    return np.stack([layer[int(layer.mean(1).argmax())] for layer in prev])


def rauq_score(token_prev: np.ndarray, token_prob: np.ndarray, alpha: float) -> float:
    """[`RAUQ`][halluprobe.RAUQ] score of one answer; ``token_prev [NL, H, A]``, ``token_prob [A]``."""
    prev = np.asarray(token_prev, dtype=np.float64)
    prob = np.asarray(token_prob, dtype=np.float64)
    if prev.ndim != 3 or prev.shape[-1] != prob.shape[0] or prob.shape[0] == 0:
        raise ValueError(
            f"rauq_score needs token_prev [NL, H, A] and token_prob [A]; got {prev.shape}, {prob.shape}"
        )
    return _rauq_layers(prob, _previous_token_heads(prev), alpha)


def mtopdiv(weights: np.ndarray, prompt_len: int) -> float:
    """MTopDiv of one head: minimum spanning forest length attaching response tokens to the prompt.

    The prompt is one vertex; response token ``i`` links to key ``j < i`` with length
    ``1 - p_ij`` and to the prompt with ``1 - max_{j < P} p_ij``. The result is the total length of a
    minimum spanning tree of that graph (``scipy.sparse.csgraph.minimum_spanning_tree``) divided by
    the number of response tokens.

    Args:
        weights: ``[R, L]`` attention weights of the response rows (row ``i`` at position ``L - R + i``).
        prompt_len: Number of prompt keys ``P`` (``1 <= P <= L - R``).
    """
    w = np.asarray(weights, dtype=np.float64)
    r, length = w.shape
    if r < 1 or not 1 <= prompt_len <= length - r:
        raise ValueError(
            f"mtopdiv needs [R, L] weights with 1 <= prompt_len <= L - R; got {w.shape}, {prompt_len}"
        )
    start = length - r
    dist = np.zeros((r + 1, r + 1))  # vertex 0 = prompt, vertex 1 + i = response token i; 0 = no edge
    dist[0, 1:] = 2.0 - w[:, :prompt_len].max(1)
    dist[1:, 1:] = np.tril(2.0 - w[:, start:], -1).T  # response row i attends to response key j < i
    # every length is shifted by 1 (to 1 + (1 - p) > 0: scipy reads 0 as "no edge"); each spanning tree
    # has r edges, so the shift changes no tree's rank and adds exactly r to the total
    return (float(minimum_spanning_tree(dist).sum()) - r) / r


def _pooled(records: list[ExampleRecord], stat: str, pool: str = "mean") -> np.ndarray:
    s, p = HEAD_STATS.index(stat), POOLS.index(pool)
    return np.stack([r.head_stats[:, :, s, p].reshape(-1) for r in records]).astype(np.float64)


def lookback_matrix(records: list[ExampleRecord]) -> np.ndarray:
    """``[n, NL * H]`` mean lookback ratio of every head (LookbackLens input)."""
    return _pooled(records, "lookback_ratio")


def sink_matrix(records: list[ExampleRecord], k: int) -> np.ndarray:
    """``[n, NL * H * k]`` the ``k`` largest ``c̄_j`` of every head (SinkProbe input)."""
    return np.stack([r.sink_topk[:, :, :k].reshape(-1) for r in records]).astype(np.float64)


def logdiag_matrix(records: list[ExampleRecord]) -> np.ndarray:
    """``[n, NL]`` per layer the mean over heads of the mean ``log p_ii`` (LLMCheckAttention input)."""
    s, p = HEAD_STATS.index("diag_log"), POOLS.index("mean")
    return np.stack([r.head_stats[:, :, s, p].mean(1) for r in records]).astype(np.float64)


def intrygue_matrix(records: list[ExampleRecord], entropy_index: int) -> np.ndarray:
    """``[n, 1 + NL * H]``: mean next-token entropy (logit statistic ``entropy_index``), top-1 sinks."""
    ent = np.array([r.logit_pooled[entropy_index, 0] for r in records], dtype=np.float64)
    return np.hstack([ent[:, None], sink_matrix(records, 1)])


def toha_matrix(records: list[ExampleRecord]) -> np.ndarray:
    """``[n, NL * H]`` MTopDiv of every head (TOHA input); needs records extracted with TOHA."""
    if any(r.mtopdiv.size == 0 for r in records):
        raise ValueError("TOHA needs records extracted with TOHA enabled (MTopDiv of every head)")
    return np.stack([r.mtopdiv.reshape(-1) for r in records]).astype(np.float64)


def rauq_matrix(records: list[ExampleRecord], logprob_index: int) -> np.ndarray:
    """``[n, 1 + NL, A_max] float64`` `RAUQ` input, NaN after each answer.

    Row 0: the probability ``exp(logprob)`` of every answer token (logit statistic ``logprob_index``,
    the answer token's log-probability); row ``1 + l``: the previous-token weights of layer ``l``'s head
    with the largest mean previous-token weight on this answer.
    """
    if not records:
        raise ValueError("rauq_matrix needs at least one record")
    n_layers = records[0].token_prev.shape[0]
    a_max = max(r.token_prev.shape[-1] for r in records)
    out = np.full((len(records), 1 + n_layers, a_max), np.nan)
    for i, r in enumerate(records):
        a = r.token_prev.shape[-1]
        if r.token_prev.shape[0] != n_layers or r.token_logit.shape[0] != a:
            raise ValueError(
                f"record {r.id}: token_prev {r.token_prev.shape} / token_logit "
                f"{r.token_logit.shape} do not match {n_layers} layers and its answer"
            )
        out[i, 0, :a] = np.exp(r.token_logit[:, logprob_index])
        out[i, 1:, :a] = _previous_token_heads(r.token_prev)
    return out
