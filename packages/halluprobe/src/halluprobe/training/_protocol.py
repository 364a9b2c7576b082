"""The paper's training protocol (Section 5.3, Appendix L.3).

- Each feature set feeds a class-balanced L2 logistic regression (liblinear) on standardised
  features; ``C`` in `CS` is chosen by validation AUROC, then the threshold by validation F1.
- Ties go to the smaller ``K`` and ``C`` and, for the threshold, to the higher one.
- ``K`` (A7's number of induction heads) in `KS` is chosen by the validation AUROC of A7 alone.
- ``k`` (A64's sink values per head) in ``1..10`` by grouped five-fold cross-validation on train.
- A7's and L9's features are a fixed selection (default: the packaged ones, chosen once by
  `halluprobe.blocks`), never reselected on a training split.
- Nothing is refit on train + validation. Metrics come from `halubench_data.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from halubench_data.metrics import C_GRID, best_by_validation
from sklearn.preprocessing import StandardScaler

from halluprobe._numeric import sigmoid
from halluprobe.blocks._blocks import (
    A7_SELECTION,
    KS,
    L9_SELECTION,
    A7Block,
    A64Block,
    Block,
    GBlock,
    H64Block,
    L9Block,
    parse_feature_set,
)
from halluprobe.blocks._contrast import CBlock
from halluprobe.features._records import MAX_SINKS, ExampleRecord

CS: tuple[float, ...] = C_GRID
"""Regularisation strengths searched, ascending (ties go to the first): ``halubench_data.metrics.C_GRID``."""


@dataclass
class ProbeFit:
    """A fitted feature-set probe: blocks, scaler, logistic weights, and what validation chose."""

    feature_set: str
    """Name such as ``"A7H64"``."""
    blocks: list[Block]
    """Fitted blocks, in canonical order."""
    scaler: StandardScaler
    """Standardiser of the concatenated block outputs (fit on train)."""
    coef: np.ndarray
    """``[d] float64`` logistic-regression weights on the standardised features."""
    intercept: float
    """Logistic-regression intercept."""
    C: float
    """Chosen regularisation strength."""
    threshold: float
    """Probability threshold chosen by validation F1; label 1 (hallucinated) when ``p >= threshold``."""
    val_auroc: float
    """Validation AUROC at the chosen ``C``."""
    selection: dict[str, float] = field(default_factory=dict)
    """Other choices (``K``, ``k``) and their selection scores."""

    def features(self, records: list[ExampleRecord]) -> np.ndarray:
        """``[n, d]`` standardised concatenated features of ``records``."""
        x = np.hstack([b.transform(records) for b in self.blocks])
        return self.scaler.transform(x)

    def decision_function(self, records: list[ExampleRecord]) -> np.ndarray:
        """``[n]`` logits; higher means more likely hallucinated."""
        return self.features(records) @ self.coef + self.intercept

    def predict_proba(self, records: list[ExampleRecord]) -> np.ndarray:
        """``[n, 2]`` probabilities of labels 0 and 1; column 1 = hallucinated (scikit-learn's shape)."""
        p = sigmoid(self.decision_function(records))
        return np.stack([1.0 - p, p], 1)

    def predict(self, records: list[ExampleRecord]) -> np.ndarray:
        """``[n] int64`` labels: 1 (hallucinated) where the probability reaches `threshold`."""
        return (self.predict_proba(records)[:, 1] >= self.threshold).astype(np.int64)


def _metrics():
    from halubench_data import metrics

    return metrics


def _logreg(c: float):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(solver="liblinear", class_weight="balanced", C=c, max_iter=1000)


def fit_blocks(
    blocks: list[Block],
    feature_set: str,
    train: list[ExampleRecord],
    y_train: np.ndarray,
    val: list[ExampleRecord],
    y_val: np.ndarray,
    cs: tuple[float, ...] = CS,
    sample_weight: np.ndarray | None = None,
) -> ProbeFit:
    """Fit blocks on train, choose ``C`` by validation AUROC and the threshold by validation F1.

    ``sample_weight`` (``[n_train]``, e.g. `halluprobe.training._calibration.source_weights`) weighs the
    training rows of the logistic regression (on top of the balanced class weights).
    """
    y_train, y_val = np.asarray(y_train), np.asarray(y_val)
    for b in blocks:
        b.fit(train, y_train)
    x_tr = np.hstack([b.transform(train) for b in blocks])
    scaler = StandardScaler().fit(x_tr)
    z_tr = scaler.transform(x_tr)
    z_va = scaler.transform(np.hstack([b.transform(val) for b in blocks]))
    m = _metrics()

    def fit(c: float):
        lr = _logreg(c).fit(z_tr, y_train, sample_weight=sample_weight)
        return float(m.auroc(lr.decision_function(z_va), y_val)), lr

    c, score, lr = best_by_validation(sorted(cs), fit)
    p_val = lr.predict_proba(z_va)[:, list(lr.classes_).index(1)]
    threshold = float(m.select_threshold(p_val, y_val))
    return ProbeFit(feature_set, blocks, scaler, lr.coef_[0].astype(np.float64), float(lr.intercept_[0]), c,
                    threshold, score)  # fmt: skip


def select_heads(
    order: list[int],
    train: list[ExampleRecord],
    y_train: np.ndarray,
    val: list[ExampleRecord],
    y_val: np.ndarray,
    ks: tuple[int, ...] = KS,
    features: tuple[str, ...] = A7_SELECTION,
) -> tuple[int, dict[int, float]]:
    """Choose A7's ``K`` by validation AUROC of A7 alone (ties to the smaller K).

    Args:
        order: Flat head indices ranked by induction score, strongest first.
        train: Training records.
        y_train: Their labels.
        val: Validation records.
        y_val: Their labels.
        ks: Head counts searched.
        features: A7's features.

    Returns:
        The chosen ``K`` and the validation AUROC of every ``K`` tried.
    """
    scores: dict[int, float] = {}
    for k in sorted(ks):
        if k > len(order):
            break
        scores[k] = fit_blocks([A7Block(order[:k], features)], "A7", train, y_train, val, y_val).val_auroc
    if not scores:
        raise ValueError("select_heads needs at least one head in the induction ranking")
    best = max(scores.values())
    return min(k for k, s in scores.items() if s == best), scores


def select_sink_count(
    train: list[ExampleRecord], y: np.ndarray, groups: list[str], folds: int = 5, cs: tuple[float, ...] = CS
) -> tuple[int, dict[int, float]]:
    """Choose A64's ``k`` in ``1..MAX_SINKS`` by grouped ``folds``-fold CV AUROC on train.

    For each ``k`` the score is the best mean fold AUROC over ``cs``; ties go to the smaller ``k``.
    Folds whose held-out part has one class only are skipped.
    """
    from sklearn.model_selection import GroupKFold

    y = np.asarray(y)
    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError("select_sink_count needs at least two groups in the training split")
    splits = list(GroupKFold(n_splits=min(folds, n_groups)).split(np.zeros(len(y)), y, groups))
    m = _metrics()
    scores: dict[int, float] = {}
    for k in range(1, MAX_SINKS + 1):
        per_c: dict[float, list[float]] = {c: [] for c in cs}
        for tr, te in splits:
            if len(set(y[te])) < 2 or len(set(y[tr])) < 2:
                continue
            rec_tr, rec_te = [train[i] for i in tr], [train[i] for i in te]
            block = A64Block(k).fit(rec_tr, y[tr])
            sc = StandardScaler().fit(block.transform(rec_tr))
            z_tr, z_te = sc.transform(block.transform(rec_tr)), sc.transform(block.transform(rec_te))
            for c in cs:
                lr = _logreg(c).fit(z_tr, y[tr])
                per_c[c].append(float(m.auroc(lr.decision_function(z_te), y[te])))
        scores[k] = max((float(np.mean(v)) for v in per_c.values() if v), default=float("nan"))
    valid = {k: s for k, s in scores.items() if not np.isnan(s)}
    if not valid:
        return 1, scores
    best = max(valid.values())
    return min(k for k, s in valid.items() if s == best), scores


def make_blocks(
    feature_set: str,
    heads: list[int],
    k: int,
    hidden_layer: int = 0,
    a7_features: tuple[str, ...] = A7_SELECTION,
    l9_features: tuple[str, ...] = L9_SELECTION,
) -> list[Block]:
    """Fresh (unfitted) blocks of a feature set, with A7's ``heads`` and A64's ``k``."""
    factories = {
        "G": lambda: GBlock(),
        "C": lambda: CBlock(),
        "A7": lambda: A7Block(heads, a7_features),
        "A64": lambda: A64Block(k),
        "H64": lambda: H64Block(hidden_layer),
        "L9": lambda: L9Block(l9_features),
    }
    return [factories[b]() for b in parse_feature_set(feature_set)]


def train_feature_sets(
    feature_sets: list[str],
    order: list[int],
    train: list[ExampleRecord],
    y_train: np.ndarray,
    groups_train: list[str],
    val: list[ExampleRecord],
    y_val: np.ndarray,
    progress: Callable[[str], None] | None = None,
    a7_features: tuple[str, ...] = A7_SELECTION,
    l9_features: tuple[str, ...] = L9_SELECTION,
    sample_weight: np.ndarray | None = None,
    val_sources: Sequence[str] | None = None,
) -> dict[str, ProbeFit]:
    """Run the whole protocol: choose ``K`` and ``k`` once, then fit every feature set.

    The protocol of ``halluprobe train`` and of [`Detector.fit`][halluprobe.Detector.fit], which pass
    ``val_sources``: every probe is then Platt-calibrated on validation and its threshold chosen across
    the validation sources (`halluprobe.training._calibration.calibrate_probe`).

    Warns `halluprobe.DegenerateFitWarning` when a split lacks a class or has fewer than
    `halluprobe.training._calibration.MIN_PER_CLASS` examples of one, and when a fit's validation
    probabilities collapse around its threshold (`halluprobe.training._calibration.check_collapse`).

    Args:
        feature_sets: Names such as ``["A7", "A64H64"]``.
        order: Flat head indices ranked by induction score (strongest first).
        train: Training records.
        y_train: Their labels.
        groups_train: Their groups (for the grouped cross-validation of ``k``).
        val: Validation records.
        y_val: Their labels.
        progress: Optional callable ``(message) -> None`` told about each step.
        a7_features: A7's features (default the packaged selection).
        l9_features: L9's features (default the packaged selection).
        sample_weight: ``[n_train]`` weights of the probes' training rows (`fit_blocks`).
        val_sources: ``[n_val]`` sources of the validation records, each weighing the same in the
            calibration; None: no calibration.
    """
    from halluprobe.training._calibration import calibrate_probe, check_collapse, check_labels

    check_labels(y_train, y_val, what="training")
    note = progress or (lambda msg: None)
    blocks_used = {b for s in feature_sets for b in parse_feature_set(s)}
    heads, k, extra = order[:1], 1, {}
    if "A7" in blocks_used:
        note("choosing K (induction heads) on validation")
        best_k, scores = select_heads(order, train, y_train, val, y_val, features=a7_features)
        heads, extra["K"] = order[:best_k], float(best_k)
    if "A64" in blocks_used:
        note("choosing k (sink values per head) by grouped 5-fold CV on train")
        k, _ = select_sink_count(train, y_train, groups_train)
        extra["k"] = float(k)
    fits = {}
    for name in feature_sets:
        note(f"fitting {name}")
        blocks = make_blocks(name, heads, k, a7_features=a7_features, l9_features=l9_features)
        fit = fit_blocks(blocks, name, train, y_train, val, y_val, sample_weight=sample_weight)
        check_collapse(fit.predict_proba(val)[:, 1], fit.threshold, what=name)
        used = parse_feature_set(name)
        fit.selection = {key: v for key, v in extra.items() if {"K": "A7", "k": "A64"}[key] in used}
        fits[name] = fit if val_sources is None else calibrate_probe(fit, val, y_val, list(val_sources))
    return fits
