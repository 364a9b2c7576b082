"""Token-level localisation: per-token features, a token probe, character spans and span F1.

A token probe scores every answer token (higher = more likely inside a hallucinated span) from one
view of the token's features (`TOKEN_VIEWS`, `token_features`, both from `halluprobe.token_data`,
where the per-token data lives): the attention statistics of every
scored layer (`halluprobe.records.HEAD_STATS`) averaged over heads (``"mean"``) or of every head
(``"heads"``), optionally the recorded hidden state (``"+hidden"``), and the logit statistics. It
follows the sequence probes' protocol: a class-balanced logistic regression fitted on the training
tokens (a token is positive when it overlaps an annotated span), ``C`` in `TOKEN_CS` chosen by
validation token AUROC, then the threshold by validation span F1.

Beyond the token's own features, a probe can read its neighbourhood (``window > 0``,
`context_features`: the mean of the features over the tokens within ``window`` on each side, their
mean over the whole answer, and the token's relative position), and its scores can be smoothed
(``smooth``: a moving average over ``smooth`` tokens on each side) before decoding; flagged runs
separated by at most ``gap`` unflagged tokens are merged. `fit_token_probe` chooses the window with
``C`` by validation token AUROC, then ``smooth``, ``gap`` and the threshold together by validation
span F1; the test split is never used for a choice. `fit_token_probe_cv` makes the same choices by
group cross-validation over the training and validation answers together, then fits on all of them:
the threshold is then set on out-of-fold scores of every such answer instead of the validation ones.

Spans: the characters of every token scored at or above the threshold (after closing gaps of at
most ``gap`` tokens), merged into maximal runs (`decode_spans`). Span precision, recall and F1
count characters: overlap of predicted and annotated characters over predicted (precision) and
annotated (recall) characters, summed over the answers of a split (micro average), the
character-level span metric that LettuceDetect reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from halubench_data import Span
from halubench_data.metrics import best_by_validation

# the per-token data, re-exported: `halluprobe.token_data` defines them
from halluprobe.token_data import (
    TOKEN_PARTS,
    TOKEN_VIEWS,
    TokenExample,
    TokenStore,
    char_mask,
    check_view,
    compose_view,
    token_examples,
    token_features,
    token_offsets,
    token_parts,
)

__all__ = [
    "CV_FOLDS",
    "GAPS",
    "MAX_TRAIN_TOKENS",
    "SMOOTHS",
    "TOKEN_CS",
    "TOKEN_PARTS",
    "TOKEN_VIEWS",
    "WINDOWS",
    "SpanResult",
    "TaskTokenProbes",
    "TokenExample",
    "TokenProbe",
    "TokenStore",
    "char_mask",
    "check_view",
    "choose_decoding",
    "choose_span_threshold",
    "close_gaps",
    "compose_view",
    "context_features",
    "decode_spans",
    "evaluate_spans",
    "fit_and_evaluate",
    "fit_token_probe",
    "fit_token_probe_cv",
    "group_folds",
    "smooth_scores",
    "span_counts",
    "span_prf",
    "token_examples",
    "token_features",
    "token_offsets",
    "token_parts",
]

TOKEN_CS: tuple[float, ...] = (0.0003, 0.001, 0.003, 0.01, 0.1, 1.0)
"""Regularisation strengths of the token probe, ascending (ties go to the smaller)."""
MAX_TRAIN_TOKENS = 200_000
"""At most this many training tokens (a seeded uniform sample) fit the token probe."""
WINDOWS: tuple[int, ...] = (0, 4)
"""Neighbourhood windows searched by default (0: the token's own features only)."""
SMOOTHS: tuple[int, ...] = (0, 1, 2, 4)
"""Score smoothing half-widths searched by default (0: none)."""
GAPS: tuple[int, ...] = (0, 1, 3)
"""Largest gaps (in tokens) closed between flagged tokens, searched by default."""


def context_features(features: np.ndarray, window: int) -> np.ndarray:
    """``[A, 3F + 1] float32``: features, their mean within ``window`` tokens, the answer mean, position.

    With ``window == 0`` the features are returned unchanged (``[A, F]``).

    Args:
        features: ``[A, F]`` per-token features (`token_features`).
        window: Tokens on each side averaged (clipped at the answer's ends).
    """
    x = np.asarray(features)
    if window <= 0:
        return x
    a = len(x)
    csum = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(x, 0, dtype=np.float64)])
    t = np.arange(a)
    lo, hi = np.clip(t - window, 0, a), np.clip(t + window + 1, 0, a)
    near = (csum[hi] - csum[lo]) / (hi - lo)[:, None]
    whole = np.broadcast_to(csum[-1] / max(a, 1), x.shape)
    pos = (t / max(a - 1, 1))[:, None]
    return np.concatenate([x, near, whole, pos], 1).astype(np.float32)


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
    index = _CharIndex(examples)
    best: tuple[int, int, float, float] | None = None
    for sm in sorted(smooths):
        allv = np.concatenate([smooth_scores(np.asarray(s), sm) for s in scores])
        for g in sorted(gaps):
            f, thr = _best_threshold(index, allv, g)
            if best is None or f > best[3] + 1e-12:
                best = (int(sm), int(g), thr, f)
    if best is None:
        raise ValueError("choose_decoding needs at least one smoothing and one gap")
    return best


@dataclass(frozen=True)
class TokenProbe:
    """A fitted token probe: feature view, standardiser, logistic weights, ``C`` and the span decoding."""

    mean: np.ndarray
    """``[F']``: feature means on the training tokens (the features' dtype, float32)."""
    scale: np.ndarray
    """``[F']``: feature standard deviations (1 where constant)."""
    coef: np.ndarray
    """``[F'] float64``: logistic weights on the standardised features."""
    intercept: float
    """Logistic intercept."""
    C: float
    """Chosen regularisation strength."""
    threshold: float
    """Score threshold chosen by validation span F1."""
    val_auroc: float
    """Validation token AUROC at ``C`` (before smoothing)."""
    window: int = 0
    """Neighbourhood window of the features (`context_features`; 0 = the token's own features)."""
    smooth: int = 0
    """Half-width of the moving average of the token logits (`smooth_scores`; 0 = none)."""
    gap: int = 0
    """Gaps of at most this many tokens between flagged tokens are flagged too (`close_gaps`)."""
    view: str = "mean"
    """The per-token features it reads (one of `TOKEN_VIEWS`, `token_features`)."""

    def __post_init__(self):
        check_view(self.view)

    def decision_function(self, features: np.ndarray) -> np.ndarray:
        """``[A]`` token scores (higher = more likely hallucinated) of ``[A, F]`` `token_features` of `view`.

        The logits of the probe on `context_features` (in the features' float dtype, as
        scikit-learn's ``decision_function``), smoothed over ``smooth`` tokens on each side.
        """
        x = context_features(features, self.window)
        if x.ndim != 2 or x.shape[1] != len(self.mean):
            raise ValueError(
                f"the token probe reads {len(self.mean)} features per token (view {self.view!r}, window "
                f"{self.window}); got {x.shape[1:]}: build them with token_features(..., view={self.view!r}) "
                "from a forward recorded like the training one"
            )
        z = (x - self.mean) / self.scale
        # in the features' dtype, as scikit-learn's decision_function: the same numbers to the last bit
        coef, intercept = (
            self.coef.astype(z.dtype).reshape(1, -1).T,
            np.asarray(self.intercept, dtype=z.dtype),
        )
        return smooth_scores((z @ coef + intercept).ravel(), self.smooth)

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """``[A, 2]`` probabilities (the logistic of `decision_function`); column 1 = hallucinated."""
        from halluprobe.numeric import sigmoid

        p = sigmoid(self.decision_function(features))
        return np.stack([1.0 - p, p], 1)

    def spans(self, features: np.ndarray, offsets: np.ndarray, n_chars: int) -> tuple[Span, ...]:
        """Character spans of the tokens whose score reaches `threshold` (gaps of ``gap`` closed)."""
        return decode_spans(offsets, self.decision_function(features), self.threshold, n_chars, self.gap)


@dataclass(frozen=True)
class TaskTokenProbes:
    """One token probe per task, each fitted and decoded on its own task's splits, read as one scorer.

    An answer is scored by its task's probe, shifted by that probe's threshold, so that one threshold
    (0) flags every task's tokens; the gap closed is its task's. The task is the answer's dataset (a
    RAGTruth task type, say), which a caller knows when it scores the answer.
    """

    probes: dict[str, TokenProbe]
    """``{task: fitted TokenProbe}``."""

    def _probe(self, task: str) -> TokenProbe:
        if task not in self.probes:
            raise ValueError(f"no token probe for task {task!r}; fitted for {sorted(self.probes)}")
        return self.probes[task]

    def scores(self, task: str, features: np.ndarray) -> np.ndarray:
        """``[A]`` token scores of the task's probe minus its threshold (flag a token at ``>= 0``)."""
        probe = self._probe(task)
        return probe.decision_function(features) - probe.threshold

    def gap(self, task: str) -> int:
        """Gaps of at most this many tokens between flagged tokens are flagged (the task's probe)."""
        return self._probe(task).gap


def _stack(examples: Sequence[TokenExample], window: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([context_features(e.features, window) for e in examples])
    return x, np.concatenate([e.labels for e in examples])


def fit_token_probe(
    train: Sequence[TokenExample], validation: Sequence[TokenExample], *, cs: Sequence[float] = TOKEN_CS,
    max_train_tokens: int = MAX_TRAIN_TOKENS, seed: int = 42, windows: Sequence[int] = WINDOWS,
    smooths: Sequence[int] = SMOOTHS, gaps: Sequence[int] = GAPS, view: str = "mean",
) -> TokenProbe:  # fmt: skip
    """Fit on training tokens; window and ``C`` by validation token AUROC; decoding by validation span F1.

    Ties go to the smaller window and ``C``; `choose_decoding` then picks ``smooth``, ``gap`` and the
    threshold. With ``windows=smooths=gaps=(0,)`` this is the plain token probe. ``view`` names the
    `TOKEN_VIEWS` entry the examples' features were built with (saved with the probe).

    Raises:
        ValueError: when the training tokens lack a label.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    check_view(view)
    views: dict[int, tuple] = {}
    for w in sorted(set(windows)):
        x, y = _stack(train, w)
        if len(set(y.tolist())) < 2:
            raise ValueError(
                "the token probe needs hallucinated and supported training tokens (spans in train)"
            )
        if len(y) > max_train_tokens:
            keep = np.random.default_rng(seed).choice(len(y), max_train_tokens, replace=False)
            x, y = x[keep], y[keep]
        mu, sd = x.mean(0), x.std(0)
        views[w] = (x, y, mu, np.where(sd > 1e-8, sd, 1.0), *_stack(validation, w))

    def fit(cand: tuple[int, float]):
        x, y, mu, sd, xv, yv = views[cand[0]]
        lr = LogisticRegression(C=cand[1], class_weight="balanced", max_iter=500).fit((x - mu) / sd, y)
        a = roc_auc_score(yv, lr.decision_function((xv - mu) / sd)) if len(set(yv.tolist())) == 2 else 0.5
        return a, lr

    (w, c), auc, lr = best_by_validation([(w, c) for w in sorted(views) for c in cs], fit, tol=1e-12)
    mu, sd = views[w][2], views[w][3]
    views.clear()
    probe = TokenProbe(mu, sd, lr.coef_[0].astype(np.float64), float(lr.intercept_[0]), float(c),
                       float("nan"), float(auc), window=int(w), view=view)  # fmt: skip
    raw = [probe.decision_function(e.features) for e in validation]
    if tuple(smooths) == (0,) and tuple(gaps) == (0,):
        sm, g, thr = 0, 0, choose_span_threshold(validation, raw)
    else:
        sm, g, thr, _ = choose_decoding(validation, raw, smooths=smooths, gaps=gaps)
    return replace(probe, threshold=thr, smooth=sm, gap=g)


CV_FOLDS = 5
"""Folds of `fit_token_probe_cv`."""


def group_folds(examples: Sequence[TokenExample], folds: int = CV_FOLDS, seed: int = 42) -> np.ndarray:
    """``[n] int``: the fold of each example; every answer of a group shares its group's fold.

    The groups (sorted) are dealt round-robin in a seeded random order, so fold sizes differ by at most
    one group.

    Raises:
        ValueError: with fewer than two folds or fewer groups than folds.
    """
    groups = sorted({e.group for e in examples})
    if folds < 2 or len(groups) < folds:
        raise ValueError(f"{folds}-fold cross-validation needs at least 2 folds and {folds} groups, got "
                         f"{len(groups)} groups")  # fmt: skip
    order = np.random.default_rng(seed).permutation(len(groups))
    fold_of = {groups[g]: k % folds for k, g in enumerate(order)}
    return np.array([fold_of[e.group] for e in examples], dtype=np.int64)


def _fit_rows(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, C: float, max_tokens: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:  # fmt: skip
    """``(mean, scale, coef, intercept)`` of a balanced logistic regression on ``x[rows]`` (subsampled)."""
    from sklearn.linear_model import LogisticRegression

    if len(rows) > max_tokens:
        rows = np.sort(np.random.default_rng(seed).choice(rows, max_tokens, replace=False))
    xr, yr = x[rows], y[rows]
    if len(set(yr.tolist())) < 2:
        raise ValueError("the token probe needs hallucinated and supported training tokens (spans in train)")
    mu, sd = xr.mean(0), xr.std(0)
    sd = np.where(sd > 1e-8, sd, 1.0)
    lr = LogisticRegression(C=C, class_weight="balanced", max_iter=500).fit((xr - mu) / sd, yr)
    return mu, sd, lr.coef_[0].astype(np.float64), float(lr.intercept_[0])


def fit_token_probe_cv(
    examples: Sequence[TokenExample], *, folds: int = CV_FOLDS, cs: Sequence[float] = TOKEN_CS,
    windows: Sequence[int] = WINDOWS, smooths: Sequence[int] = SMOOTHS, gaps: Sequence[int] = GAPS,
    max_train_tokens: int = MAX_TRAIN_TOKENS, seed: int = 42, view: str = "mean",
) -> TokenProbe:  # fmt: skip
    """A token probe whose every choice is made by group ``folds``-fold cross-validation, fitted on all.

    For `fit_token_probe`'s train/validation protocol, the decoding threshold is chosen on the
    validation answers alone, a few hundred of them, and the probe never sees them. Here ``examples``
    (a training and a validation split together, say) are dealt into folds by group (`group_folds`);
    each window and ``C`` gets out-of-fold token scores (a probe fitted on the other folds scores each
    fold); the pair with the best out-of-fold token AUROC wins (ties: smaller window, then smaller
    ``C``); `choose_decoding` picks ``smooth``, ``gap`` and the threshold on the out-of-fold scores of
    every answer; the returned probe is then fitted on all ``examples`` with those choices. Its
    ``val_auroc`` is the out-of-fold token AUROC. A test split must not be among ``examples``.

    Raises:
        ValueError: with fewer groups than folds, or a training fold without both token labels.
    """
    from sklearn.metrics import roc_auc_score

    check_view(view)
    fold = group_folds(examples, folds, seed)
    tok_fold = np.concatenate([np.full(len(e.offsets), f) for e, f in zip(examples, fold, strict=True)])
    bounds = np.cumsum([0] + [len(e.offsets) for e in examples])
    stacked: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def out_of_fold(cand: tuple[int, float]) -> tuple[float, list[np.ndarray]]:
        w, c = cand
        if w not in stacked:
            stacked.clear()
            stacked[w] = _stack(examples, w)
        x, y = stacked[w]
        s = np.zeros(len(y), dtype=np.float64)
        for k in range(folds):
            mu, sd, coef, icpt = _fit_rows(x, y, np.flatnonzero(tok_fold != k), c, max_train_tokens, seed)
            held = tok_fold == k
            s[held] = ((x[held] - mu) / sd) @ coef + icpt
        auc = roc_auc_score(y, s) if len(set(y.tolist())) == 2 else 0.5
        return float(auc), [s[bounds[i] : bounds[i + 1]] for i in range(len(examples))]

    cands = [(int(w), float(c)) for w in sorted(set(windows)) for c in cs]
    (w, c), auc, oof = best_by_validation(cands, out_of_fold, tol=1e-12)
    sm, g, thr, _ = choose_decoding(examples, oof, smooths=smooths, gaps=gaps)
    x, y = stacked[w] if w in stacked else _stack(examples, w)
    stacked.clear()
    mu, sd, coef, icpt = _fit_rows(x, y, np.arange(len(y)), c, max_train_tokens, seed)
    return TokenProbe(mu, sd, coef, icpt, float(c), thr, float(auc), window=int(w), smooth=int(sm),
                      gap=int(g), view=view)  # fmt: skip


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


def fit_and_evaluate(
    splits: dict[str, Sequence[TokenExample]], *, n_bootstrap: int = 500, view: str = "mean",
    cv_folds: int = 0,
) -> tuple[TokenProbe, SpanResult]:  # fmt: skip
    """Fit a token probe on ``splits["train"]`` / ``["validation"]`` and score ``["test"]`` once.

    ``view``: the `TOKEN_VIEWS` entry the examples' features were built with (saved with the probe).
    ``cv_folds``: 0 for `fit_token_probe` (choices on validation); else `fit_token_probe_cv` with that many
    folds over the training and validation answers together.
    """
    if cv_folds:
        probe = fit_token_probe_cv([*splits["train"], *splits["validation"]], folds=cv_folds, view=view)
    else:
        probe = fit_token_probe(splits["train"], splits["validation"], view=view)
    test = splits["test"]
    scores = [probe.decision_function(e.features) for e in test]
    return probe, evaluate_spans(test, scores, probe.threshold, n_bootstrap=n_bootstrap, gap=probe.gap)
