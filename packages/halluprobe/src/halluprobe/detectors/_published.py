"""Published attention detectors as scikit-learn estimators on response-row statistics.

Every detector's `raw_score` is the detector's statistic, where **higher means more likely
hallucinated**. ``decision_function`` is ``raw_score - threshold_`` (same ranking, positive means
hallucinated, the scikit-learn convention) and ``predict`` returns the larger class label
(``classes_[1]``, i.e. 1 = hallucinated) where it is positive. ``threshold_`` is chosen by F1 on the
data given to ``fit`` (ties toward the higher threshold), except for the logistic probes, whose
``threshold_`` is 0 (probability 0.5) so that ``predict`` agrees with ``predict_proba``; the
protocol picks its own F1 threshold on validation. Every detector has ``predict_proba`` ``[n, 2]``
(columns follow ``classes_``, column 1 = hallucinated), consistent with ``predict``: the logistic
probes' own probabilities; for the others ``sigmoid(slope_ * decision_function)``, with ``slope_ > 0``
fitted by maximum likelihood on the data given to ``fit`` (a Platt scaling that keeps 0.5 at the
threshold); for the unsupervised `RAUQ` one minus the worst layer's geometric-mean confidence.
Detectors that choose a setting (a layer, heads, a count) choose it by AUROC on the data given to
``fit``; the protocol passes the validation split. The ``*_matrix`` helpers build each detector's
input from [`ExampleRecord`][halluprobe.ExampleRecord] lists. See ``docs/reference/detectors.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from halluprobe._numeric import sigmoid
from halluprobe.detectors._published_inputs import (  # noqa: F401 (re-exported: the detectors' inputs)
    _rauq_layers,
    intrygue_matrix,
    logdiag_matrix,
    lookback_matrix,
    mtopdiv,
    rauq_matrix,
    rauq_score,
    sink_matrix,
    toha_matrix,
)


def _auroc(scores, labels) -> float:
    from halubench_data.metrics import auroc

    return float(auroc(np.asarray(scores, dtype=np.float64), np.asarray(labels)))


def _threshold(scores, labels) -> float:
    from halubench_data.metrics import select_threshold

    return float(select_threshold(np.asarray(scores, dtype=np.float64), np.asarray(labels)))


class _ScoreDetector(ClassifierMixin, BaseEstimator):
    """Binary detector with a real-valued score; subclasses implement ``_fit_scores`` and ``_score``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def fit(self, X, y):
        """Fit on ``X`` ``[n, d]`` and labels ``y`` (two classes; the larger one is "hallucinated").

        Returns:
            self.
        """
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(
                f"Only binary classification is supported. {type(self).__name__} got {len(self.classes_)} "
                + ("class" if len(self.classes_) == 1 else "classes")
            )
        yb = (y == self.classes_[1]).astype(np.int64)
        self._fit_scores(X, yb)
        self.threshold_ = self._fit_threshold(X, yb)
        self.slope_ = self._fit_slope(X, yb)
        return self

    def _fit_slope(self, X, y) -> float:
        """``a > 0`` maximising the likelihood of ``sigmoid(a * decision)`` on the fit data (floor 1e-6)."""
        return _platt_slope(self._score(X) - self.threshold_, y)

    def _fit_threshold(self, X, y):
        return _threshold(self._score(X), y)

    def raw_score(self, X):
        """``[n]`` the detector's statistic; higher means more likely hallucinated."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self._score(X)

    def decision_function(self, X):
        """``[n]`` ``raw_score - threshold_``; higher means more likely hallucinated, > 0 predicts it."""
        return self.raw_score(X) - self.threshold_

    def predict(self, X):
        """``[n]`` labels: ``classes_[1]`` (hallucinated) where ``decision_function`` is positive."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]

    def predict_proba(self, X):
        """``[n, 2]`` probabilities, columns follow ``classes_`` (column 1 = hallucinated).

        ``sigmoid(slope_ * decision_function)``: 0.5 at the threshold, so ``argmax`` agrees with
        ``predict``; the slope is fitted on the data given to ``fit``.
        """
        check_is_fitted(self)
        p = sigmoid(self.slope_ * self.decision_function(X))
        return np.stack([1.0 - p, p], 1)


_MIN_SLOPE = 1e-6
"""Smallest Platt slope: a score with no signal on the fit data gives probabilities near 0.5."""


def _platt_slope(z: np.ndarray, y: np.ndarray) -> float:
    """``a >= _MIN_SLOPE`` maximising ``sum log sigmoid((2y - 1) * a * z)`` (Newton steps, 1-D, concave)."""
    z, s = np.asarray(z, dtype=np.float64), 2.0 * np.asarray(y, dtype=np.float64) - 1.0
    if not np.any(z):
        return _MIN_SLOPE
    a = 1.0 / max(float(np.std(z)), 1e-12)
    for _ in range(50):
        p = sigmoid(-s * a * z)  # derivative of -log sigmoid(s a z) wrt a is -s z p
        grad = float(np.sum(s * z * p))
        hess = float(np.sum(z * z * p * (1.0 - p))) + 1e-12
        step = grad / hess
        a = max(a + step, _MIN_SLOPE)
        if abs(step) <= 1e-10 * max(a, 1.0):
            break
    return float(a)


class _LinearProbe(_ScoreDetector):
    """Standardised features into a class-balanced L2 logistic regression (liblinear)."""

    def __init__(self, C: float = 1.0):
        self.C = C

    def _fit_scores(self, X, y):
        from sklearn.linear_model import LogisticRegression

        self.mean_ = X.mean(0)
        sd = X.std(0)
        self.scale_ = np.where(sd > 1e-12, sd, 1.0)
        lr = LogisticRegression(solver="liblinear", class_weight="balanced", C=self.C)
        lr.fit((X - self.mean_) / self.scale_, y)
        self.coef_, self.intercept_ = lr.coef_[0], float(lr.intercept_[0])

    def _fit_threshold(self, X, y):
        return 0.0

    def _fit_slope(self, X, y) -> float:
        return 1.0  # the logistic regression's own probabilities

    def _score(self, X):
        return ((X - self.mean_) / self.scale_) @ self.coef_ + self.intercept_


class LookbackLens(_LinearProbe):
    """Lookback Lens: logistic regression on the mean lookback ratio of every head.

    Input: `lookback_matrix` ``[n, NL * H]``. Supervised; ``C`` is a constructor argument (the
    protocol chooses it on validation). Higher score means more likely hallucinated.
    """


def _prefix_by_auroc(X, y, ranked, max_heads: int) -> np.ndarray:
    """The first ``m <= max_heads`` columns of ``ranked`` whose mean has the best AUROC (ties: smaller m)."""
    best = None
    for m in range(1, min(int(max_heads), len(ranked)) + 1):
        a = _auroc(X[:, ranked[:m]].mean(1), y)
        if best is None or a > best[0]:
            best = (a, np.asarray(ranked[:m]))
    if best is None:
        raise ValueError(f"no head to choose from: max_heads={max_heads}, {len(ranked)} ranked heads")
    return best[1]


class LookbackLensHeads(_ScoreDetector):
    """The paper's Lookback Lens variant (Appendix M): the mean lookback ratio of at most 10 heads.

    Input: `lookback_matrix` ``[n, NL * H]``. ``fit`` ranks heads by their own AUROC (of
    ``-ratio``: a hallucinated answer looks back at the context less) and keeps the first
    ``m <= max_heads`` whose mean has the best AUROC on the data given to ``fit`` (the protocol passes
    the validation split). Score = minus the mean lookback ratio of the kept heads (higher = more likely
    hallucinated). Beside `LookbackLens`, the original all-heads logistic regression.

    Args:
        max_heads: Most heads averaged (10 in the paper).
    """

    def __init__(self, max_heads: int = 10):
        self.max_heads = max_heads

    def _fit_scores(self, X, y):
        if int(self.max_heads) < 1:
            raise ValueError(f"max_heads must be >= 1, got {self.max_heads}")
        own = np.array([_auroc(-X[:, j], y) for j in range(X.shape[1])])
        self.heads_ = _prefix_by_auroc(-X, y, np.argsort(-own, kind="stable"), self.max_heads)

    def _score(self, X):
        return -X[:, self.heads_].mean(1)


class SinkProbe(_LinearProbe):
    """SinkProbe: logistic regression on the ``k`` largest sink values ``c̄_j`` of every head.

    Input: `sink_matrix` ``[n, NL * H * k]``. Supervised. Higher score means more likely
    hallucinated.
    """


class LLMCheckAttention(_ScoreDetector):
    """LLM-Check attention score: the mean ``log p_ii`` of one layer, layer chosen by AUROC.

    Input: `logdiag_matrix` ``[n, NL]`` (per layer, mean over heads and answer tokens).
    ``fit`` chooses the layer and, with ``direction="auto"``, the sign, by AUROC on its data (the
    validation split). Higher score means more likely hallucinated.

    Args:
        direction: ``"auto"``, ``1`` (higher ``log p_ii`` = hallucinated) or ``-1``.
    """

    def __init__(self, direction: str | int = "auto"):
        self.direction = direction

    def _fit_scores(self, X, y):
        if self.direction not in ("auto", 1, -1):
            raise ValueError(f"direction must be 'auto', 1 or -1, got {self.direction!r}")
        signs = (1, -1) if self.direction == "auto" else (self.direction,)
        best = None
        for j in range(X.shape[1]):
            for s in signs:
                a = _auroc(s * X[:, j], y)
                if best is None or a > best[0]:
                    best = (a, j, s)
        _, self.layer_, self.sign_ = best

    def _score(self, X):
        return self.sign_ * X[:, self.layer_]


class INTRYGUE(_ScoreDetector):
    """INTRYGUE: mean next-token entropy gated by the top-1 sink rate of the top-K induction heads.

    Input: `intrygue_matrix` ``[n, 1 + NL * H]``: column 0 the answer's mean next-token
    entropy, then the top-1 sink rate of every head. Score = entropy * mean sink rate of the K heads
    ranked first in ``head_order``; ``K`` in ``ks`` is chosen by AUROC on the data given to ``fit``.
    Higher score means more likely hallucinated (uncertain, and the induction heads idle on a sink
    rather than copying from the context).

    Args:
        head_order: Flat head indices ranked by induction score (``None``: column order).
        ks: Head counts searched (ties to the smaller).
    """

    def __init__(self, head_order: Sequence[int] | None = None, ks: Sequence[int] = (1, 2, 4, 8, 16, 32)):
        self.head_order = head_order
        self.ks = ks

    def _order(self, n_heads):
        order = list(range(n_heads)) if self.head_order is None else [int(h) for h in self.head_order]
        if not order or max(order) >= n_heads:
            raise ValueError(f"INTRYGUE head_order must index the {n_heads} head columns")
        return order

    def _combine(self, X, heads):
        """Score of the head columns ``heads`` (entropy times their mean sink rate)."""
        return X[:, 0] * X[:, 1 + heads].mean(1)

    def _fit_scores(self, X, y):
        if X.shape[1] < 2:
            raise ValueError(f"{type(self).__name__} needs a first column and at least one head column")
        order = self._order(X.shape[1] - 1)
        best = None
        for k in sorted(self.ks):
            if k > len(order):
                break
            heads = np.asarray(order[:k])
            a = _auroc(self._combine(X, heads), y)
            if best is None or a > best[0]:
                best = (a, heads)
        self.heads_ = best[1]

    def _score(self, X):
        return self._combine(X, self.heads_)


class SinkRate(INTRYGUE):
    """INTRYGUE's sink-rate term alone (the paper's Appendix M): the mean top-1 sink rate of the top-K heads.

    Input: `intrygue_matrix` (its entropy column is ignored), ``[n, 1 + NL * H]``. Score = mean
    top-1 sink rate ``max_j c̄_j`` of the ``K`` heads ranked first in ``head_order``, ``K`` in ``ks`` by
    AUROC on the data given to ``fit``. Higher score (the induction heads idle on a sink) means more
    likely hallucinated.
    """

    def _combine(self, X, heads):
        """Score of the head columns ``heads`` (their mean sink rate; the entropy column is unused)."""
        return X[:, 1 + heads].mean(1)


class TOHA(_ScoreDetector):
    """TOHA: the mean MTopDiv of the selected heads (response-to-prompt topological divergence).

    Input: `toha_matrix` ``[n, NL * H]`` (from [`mtopdiv`][halluprobe.mtopdiv] of each head's dense response
    block). ``fit`` ranks heads by their own AUROC and keeps the first ``m`` in ``1..max_heads`` whose
    mean has the best AUROC on the data given to ``fit``. Higher score (the answer is far from the
    prompt in the attention graph) means more likely hallucinated.
    """

    def __init__(self, max_heads: int = 10):
        self.max_heads = max_heads

    def _fit_scores(self, X, y):
        own = np.array([_auroc(X[:, j], y) for j in range(X.shape[1])])
        self.heads_ = _prefix_by_auroc(X, y, np.argsort(-own, kind="stable"), self.max_heads)

    def _score(self, X):
        return X[:, self.heads_].mean(1)


class RAUQ(ClassifierMixin, BaseEstimator):
    """RAUQ (unsupervised): recurrent confidence through each layer's most previous-token head.

    Input: `rauq_matrix` ``[n, 1 + NL, A_max]``: row 0 the probability of every answer token, row
    ``1 + l`` the previous-token weights of layer ``l``'s head with the largest mean previous-token
    weight on this answer, NaN after the answer. Confidence runs ``c_1 = p_1``,
    ``c_t = alpha * p_t + (1 - alpha) * w_t * c_{t-1}``; a layer's uncertainty is ``-mean_t log c_t``
    and ``raw_score`` the maximum over layers (higher = more likely hallucinated). ``fit`` learns
    nothing (labels, if given, only set ``classes_``). ``predict_proba``'s column 1 is one minus the
    worst layer's geometric-mean confidence, ``1 - exp(-raw_score)``; ``decision_function`` is
    ``raw_score - log 2`` (positive where that probability exceeds 0.5).

    Args:
        alpha: Weight of the current token's probability.
    """

    def __init__(self, alpha: float = 0.2):
        self.alpha = alpha

    def fit(self, X=None, y=None):
        """Check ``alpha``; ``classes_`` = ``np.unique(y)`` when given, else ``[0, 1]``; returns self."""
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"RAUQ alpha must be in (0, 1], got {self.alpha}")
        self.classes_ = np.array([0, 1]) if y is None else np.unique(np.asarray(y))
        if len(self.classes_) != 2:
            raise ValueError(f"RAUQ needs two classes, got {len(self.classes_)}")
        return self

    def raw_score(self, X) -> np.ndarray:
        """``[n]`` RAUQ scores of a `rauq_matrix` ``[n, 1 + NL, A_max]``; higher = more hallucinated."""
        check_is_fitted(self)
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[1] < 2:
            raise ValueError(f"RAUQ needs a rauq_matrix [n, 1 + NL, A_max] (NL >= 1), got shape {X.shape}")
        out = np.empty(len(X))
        for i, row in enumerate(X):
            a = int(np.count_nonzero(~np.isnan(row[0])))
            if a == 0:
                raise ValueError(f"RAUQ input row {i} has no answer token (row 0 is all NaN)")
            out[i] = _rauq_layers(row[0, :a], row[1:, :a], float(self.alpha))
        return out

    def decision_function(self, X) -> np.ndarray:
        """``[n]`` ``raw_score - log 2``: positive where ``predict_proba`` gives more than 0.5."""
        return self.raw_score(X) - np.log(2.0)

    def predict_proba(self, X) -> np.ndarray:
        """``[n, 2]``; column 1 = ``1 - exp(-raw_score)`` (1 - the worst layer's mean confidence)."""
        p = -np.expm1(-self.raw_score(X))
        return np.stack([1.0 - p, p], 1)

    def predict(self, X) -> np.ndarray:
        """``[n]`` labels: ``classes_[1]`` where ``decision_function`` is positive."""
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]
