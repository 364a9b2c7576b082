"""Token-level localisation: per-token features, a token probe, character spans and span F1.

A token probe scores every answer token (higher = more likely inside a hallucinated span) from one
view of the token's features (`TOKEN_VIEWS`, `token_features`, both from `halluprobe.features`,
where the per-token data lives): the attention statistics of every
scored layer (`halluprobe.features.HEAD_STATS`) averaged over heads (``"mean"``) or of every head
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

Spans (`_spans`, whose names this module re-exports): the characters of every token scored
at or above the threshold (after closing gaps of at most ``gap`` tokens), merged into maximal runs
(`decode_spans`). Span precision, recall and F1
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

# the per-token data, re-exported: `halluprobe.features` defines them
from halluprobe.features._token_data import (
    TOKEN_PARTS,
    TOKEN_VIEWS,
    TokenExample,
    TokenStore,
    char_mask,
    check_view,
    compose_view,
    token_features,
    token_offsets,
    token_parts,
)
from halluprobe.features._token_examples import token_examples

# span decoding and the span metric, re-exported: `halluprobe.localisation._spans` defines them
from halluprobe.localisation._spans import (
    GAPS,
    SMOOTHS,
    SpanResult,
    choose_decoding,
    choose_span_threshold,
    close_gaps,
    decode_spans,
    evaluate_spans,
    smooth_scores,
    span_counts,
    span_prf,
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
        from halluprobe._numeric import sigmoid

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
