"""Token scores into character spans of the answer, and the character-level span metric.

`smooth_scores` and `close_gaps` prepare a token probe's scores; `decode_spans` turns them into
character spans; `span_counts` / `span_prf` give the character span precision, recall and F1 (micro
over answers, the metric LettuceDetect reports); `choose_span_threshold` and `choose_decoding` pick a
decoding on validation (or out-of-fold) scores; `evaluate_spans` scores a test split with group-bootstrap
intervals. The token probe that makes the scores is in `halluprobe.localisation`, which re-exports
these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from halubench_data import Span

from halluprobe.features._token_data import TokenExample

__all__ = [
    "GAPS",
    "SMOOTHS",
    "SpanResult",
    "choose_decoding",
    "choose_span_threshold",
    "close_gaps",
    "decode_spans",
    "evaluate_spans",
    "smooth_scores",
    "span_counts",
    "span_prf",
]

SMOOTHS: tuple[int, ...] = (0, 1, 2, 4)
"""Score smoothing half-widths searched by default (0: none)."""
GAPS: tuple[int, ...] = (0, 1, 3)
"""Largest gaps (in tokens) closed between flagged tokens, searched by default."""


def smooth_scores(scores: np.ndarray, smooth: int) -> np.ndarray:
    """``[A]`` moving average of ``scores`` over ``smooth`` tokens on each side (unchanged when 0)."""
    s = np.asarray(scores)
    if smooth <= 0 or len(s) == 0:
        return s
    csum = np.concatenate([[0.0], np.cumsum(s, dtype=np.float64)])
    t = np.arange(len(s))
    lo, hi = np.clip(t - smooth, 0, len(s)), np.clip(t + smooth + 1, 0, len(s))
    return (csum[hi] - csum[lo]) / (hi - lo)


def close_gaps(flags: np.ndarray, gap: int) -> np.ndarray:
    """``[A] bool``: ``flags`` with runs of at most ``gap`` unflagged tokens between flagged ones filled."""
    f = np.asarray(flags, dtype=bool)
    if gap <= 0 or not f.any():
        return f
    idx = np.arange(len(f))
    last = np.maximum.accumulate(np.where(f, idx, -1))
    nxt = np.minimum.accumulate(np.where(f, idx, len(f))[::-1])[::-1]
    return f | ((last >= 0) & (nxt < len(f)) & (nxt - last - 1 <= gap))


def _flagged_chars(offsets: np.ndarray, flags: np.ndarray, n_chars: int) -> np.ndarray:
    pred = np.zeros(n_chars, dtype=bool)
    for (a, b), flag in zip(offsets, flags, strict=True):
        if flag and b > a:
            pred[a:b] = True
    return pred


def decode_spans(
    offsets: np.ndarray, scores: np.ndarray, threshold: float, n_chars: int, gap: int = 0
) -> tuple[Span, ...]:
    """Character spans of the answer covered by tokens scored ``>= threshold``.

    Args:
        offsets: ``[A, 2] int``. Token character offsets (`token_offsets`).
        scores: ``[A] float``. Token scores (higher = more likely hallucinated).
        threshold: flag a token when its score is at least this.
        n_chars: the answer's length in characters.
        gap: also flag runs of at most ``gap`` tokens between flagged ones (`close_gaps`).

    Returns:
        Maximal runs of flagged characters, in order, labelled ``"hallucination"``.
    """
    offsets, scores = np.asarray(offsets), np.asarray(scores)
    if offsets.shape != (len(scores), 2):
        raise ValueError(f"offsets must be [A, 2] for {len(scores)} scores, got {offsets.shape}")
    pred = _flagged_chars(offsets, close_gaps(scores >= threshold, gap), n_chars)
    edges = np.flatnonzero(np.diff(np.concatenate([[False], pred, [False]]).astype(np.int8)))
    return tuple(Span(int(a), int(b), "hallucination") for a, b in edges.reshape(-1, 2))


def _gaps(gap: int | Sequence[int], n: int) -> list[int]:
    """One gap per answer: ``gap`` repeated, or the ``n`` given ones."""
    if isinstance(gap, (int, np.integer)):
        return [int(gap)] * n
    gaps = [int(g) for g in gap]
    if len(gaps) != n:
        raise ValueError(f"expected one gap per answer ({n}), got {len(gaps)}")
    return gaps


def span_counts(
    examples: Sequence[TokenExample], scores: Sequence[np.ndarray], threshold: float,
    gap: int | Sequence[int] = 0,
) -> np.ndarray:  # fmt: skip
    """``[n, 3] float64``: overlapping, predicted and annotated characters of each answer.

    ``gap``: one for every answer, or one per answer (a scorer whose decoding depends on the answer).
    """
    rows = []
    for ex, s, g in zip(examples, scores, _gaps(gap, len(examples)), strict=True):
        pred = _flagged_chars(ex.offsets, close_gaps(np.asarray(s) >= threshold, g), len(ex.gold))
        rows.append((np.sum(pred & ex.gold), pred.sum(), ex.gold.sum()))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3)


def span_prf(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Character precision, recall and F1 from summed ``[..., 3]`` counts (0 where undefined)."""
    ov, pr, go = counts[..., 0], counts[..., 1], counts[..., 2]
    p = np.where(pr > 0, ov / np.maximum(pr, 1), 0.0)
    r = np.where(go > 0, ov / np.maximum(go, 1), 0.0)
    f = np.where(p + r > 0, 2 * p * r / np.maximum(p + r, 1e-12), 0.0)
    return p, r, f


class _CharIndex:
    """Every character of a set of answers and the tokens covering it, for fast micro span counts."""

    def __init__(self, examples: Sequence[TokenExample]):
        from scipy.sparse import csr_matrix

        rows, cols, char0, tok0 = [], [], 0, 0
        for ex in examples:
            n = len(ex.gold)
            for k, (a, b) in enumerate(np.minimum(np.asarray(ex.offsets), n)):
                if b > a:
                    rows.append(np.arange(char0 + a, char0 + b))
                    cols.append(np.full(b - a, tok0 + k))
            char0, tok0 = char0 + len(ex.gold), tok0 + len(ex.offsets)
        r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        self.cover = csr_matrix((np.ones(len(r)), (r, c)), shape=(char0, tok0))
        self.gold = np.concatenate([ex.gold for ex in examples]) if examples else np.zeros(0, bool)
        self.bounds = np.cumsum([0] + [len(ex.offsets) for ex in examples])

    def f1(self, flags: np.ndarray) -> float:
        """Micro character span F1 of ``[n_tokens] bool`` flags (all answers concatenated)."""
        pred = (self.cover @ flags.astype(np.float64)) > 0
        counts = np.array([np.sum(pred & self.gold), pred.sum(), self.gold.sum()], dtype=np.float64)
        return float(span_prf(counts)[2])

    def flags(self, scores: np.ndarray, threshold: float, gap: int) -> np.ndarray:
        """Concatenated flags of concatenated ``scores`` with gaps closed within each answer."""
        f = scores >= threshold
        if gap <= 0:
            return f
        b = self.bounds
        return np.concatenate([close_gaps(f[b[i] : b[i + 1]], gap) for i in range(len(b) - 1)])


def _best_threshold(index: _CharIndex, scores: np.ndarray, gap: int) -> tuple[float, float]:
    """(F1, threshold) best among 60 quantiles (50% to 99.5%) of ``scores``; ties to the higher threshold."""
    best = (-1.0, float(scores.max()))
    for thr in np.unique(np.quantile(scores, np.linspace(0.5, 0.995, 60))):
        f = index.f1(index.flags(scores, thr, gap))
        if f > best[0] + 1e-12 or (abs(f - best[0]) <= 1e-12 and thr > best[1]):
            best = (f, float(thr))
    return best


def choose_span_threshold(examples: Sequence[TokenExample], scores: Sequence[np.ndarray]) -> float:
    """The threshold with the highest micro span F1 among 60 quantiles (50% to 99.5%) of the scores.

    Ties go to the higher threshold.
    """
    allv = np.concatenate([np.asarray(s) for s in scores])
    return _best_threshold(_CharIndex(examples), allv, 0)[1]


def choose_decoding(
    examples: Sequence[TokenExample], scores: Sequence[np.ndarray], *,
    smooths: Sequence[int] = SMOOTHS, gaps: Sequence[int] = GAPS,
) -> tuple[int, int, float, float]:  # fmt: skip
    """``(smooth, gap, threshold, F1)`` with the best micro span F1 of ``examples`` (validation).

    Thresholds: 60 quantiles of the smoothed scores (`choose_span_threshold`); ties go to the smaller
    ``smooth``, then the smaller ``gap``, then the higher threshold.
    """
    import functools

    from halubench_data.metrics import best_by_validation

    if not smooths or not gaps:
        raise ValueError("choose_decoding needs at least one smoothing and one gap")
    index = _CharIndex(examples)

    @functools.cache
    def smoothed(sm: int) -> np.ndarray:
        return np.concatenate([smooth_scores(np.asarray(s), sm) for s in scores])

    cands = [(int(sm), int(g)) for sm in sorted(smooths) for g in sorted(gaps)]
    (sm, g), f, thr = best_by_validation(
        cands, lambda c: _best_threshold(index, smoothed(c[0]), c[1]), tol=1e-12
    )
    return sm, g, thr, f


@dataclass(frozen=True)
class SpanResult:
    """Token- and span-level metrics of one token scorer on a set of answers, with bootstrap intervals."""

    token_auroc: float
    """AUROC over every answer token (NaN with one class)."""
    token_auroc_ci: tuple[float, float]
    """95% group-bootstrap interval (sample-weighted AUROC of the resampled tokens)."""
    span_precision: float
    """Character precision, micro-averaged over answers."""
    span_recall: float
    """Character recall, micro-averaged over answers."""
    span_f1: float
    """Character span F1 from the micro precision and recall."""
    span_f1_ci: tuple[float, float]
    """95% group-bootstrap interval of the span F1."""
    token_f1: float
    """F1 of the token labels at ``threshold``."""
    threshold: float
    """Token score threshold (chosen on validation)."""
    n_answers: int
    """Answers scored."""
    n_tokens: int
    """Tokens scored."""
    n_positive_tokens: int
    """Tokens overlapping an annotated span."""
    n_groups: int
    """Bootstrap units."""


def _token_f1(y: np.ndarray, pred: np.ndarray) -> float:
    tp, fp, fn = np.sum(pred & (y == 1)), np.sum(pred & (y == 0)), np.sum(~pred & (y == 1))
    return float(2 * tp / max(2 * tp + fp + fn, 1))


def _ci(values: list[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(values, [0.025, 0.975])
    return (float(lo), float(hi))


def evaluate_spans(
    examples: Sequence[TokenExample], scores: Sequence[np.ndarray], threshold: float, *,
    n_bootstrap: int = 500, seed: int = 42, gap: int | Sequence[int] = 0,
) -> SpanResult:  # fmt: skip
    """Token AUROC and character span precision/recall/F1 at ``threshold``, with group-bootstrap intervals.

    ``gap``: gaps of at most this many tokens between flagged tokens are flagged (`close_gaps`); one
    for every answer or one per answer.
    """
    from sklearn.metrics import roc_auc_score

    groups = sorted({e.group for e in examples})
    gi = np.array([groups.index(e.group) for e in examples])
    gaps = _gaps(gap, len(examples))
    counts = span_counts(examples, scores, threshold, gaps)
    flags = np.concatenate(
        [close_gaps(np.asarray(v) >= threshold, g) for v, g in zip(scores, gaps, strict=True)]
    )
    y = np.concatenate([e.labels for e in examples])
    s = np.concatenate([np.asarray(v) for v in scores])
    tok_item = np.concatenate([np.full(len(e.offsets), k) for k, e in enumerate(examples)])
    rng = np.random.default_rng(seed)
    aucs, f1s = [], []
    for _ in range(n_bootstrap):
        w_g = np.bincount(rng.integers(0, len(groups), len(groups)), minlength=len(groups))
        w_item = w_g[gi].astype(np.float64)
        f1s.append(float(span_prf(w_item @ counts)[2]))
        w_tok = w_item[tok_item]
        keep = w_tok > 0
        if len(set(y[keep].tolist())) == 2:
            aucs.append(roc_auc_score(y[keep], s[keep], sample_weight=w_tok[keep]))
    p, r, f = span_prf(counts.sum(0))
    return SpanResult(
        token_auroc=float(roc_auc_score(y, s)) if len(set(y.tolist())) == 2 else float("nan"),
        token_auroc_ci=_ci(aucs), span_precision=float(p), span_recall=float(r), span_f1=float(f),
        span_f1_ci=_ci(f1s), token_f1=_token_f1(y, flags), threshold=float(threshold),
        n_answers=len(examples), n_tokens=int(len(y)), n_positive_tokens=int(y.sum()), n_groups=len(groups),
    )  # fmt: skip
