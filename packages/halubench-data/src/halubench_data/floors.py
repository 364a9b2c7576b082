"""Grounding floors: what text alone reveals when the answer is compared with its context.

A detector is worth its proxy forward only where it beats these. Both read the context, question
and answer as text (`halubench_data.grounding`), never a model:

* **overlap floor** (zero fit): `halubench_data.grounding.overlap_score`, the unsupported share of
  the answer's content words. Nothing is learned; only the threshold (validation F1) is chosen.
* **grounding floor** (fitted): the `GROUNDING_FEATURES` of every answer, standardised, into an
  L2 logistic regression (liblinear, balanced class weights) fitted on the training rows. ``C`` from
  `C_GRID` maximises validation AUROC (ties: the smaller ``C``); optional sample weights (equal
  weight per source when several are pooled).

`best_floor` is the floor a detector row is compared with ("Δ floor" in the tables): the floor with
the highest AUROC on the scored examples, so the comparison never flatters a detector.

Scores: higher means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dataset import Dataset
from .grounding import GROUNDING_FEATURES, grounding_features, overlap_score
from .metrics import C_GRID, EvalResult, auroc, best_by_validation, evaluate, select_threshold
from .schema import Example, Split

__all__ = [
    "FLOORS",
    "GroundingFloor",
    "best_floor",
    "floor_results",
    "floor_scores",
    "grounding_matrix",
    "overlap_scores",
]

FLOORS: tuple[str, ...] = ("overlap floor", "grounding floor")
"""Method names of the two floors in every table."""


def overlap_scores(examples: Iterable[Example]) -> np.ndarray:
    """``[N] float64`` `overlap_score` of every example (higher = more likely hallucinated)."""
    return np.array([overlap_score(e.context, e.question, e.answer) for e in examples], dtype=np.float64)


def grounding_matrix(examples: Iterable[Example]) -> np.ndarray:
    """``[N, len(GROUNDING_FEATURES)] float64`` grounding features of every example."""
    rows = [grounding_features(e.context, e.question, e.answer) for e in examples]
    return np.stack(rows) if rows else np.zeros((0, len(GROUNDING_FEATURES)))


@dataclass
class GroundingFloor:
    """Logistic regression on `grounding_matrix`; ``C`` chosen by validation AUROC."""

    c_grid: Sequence[float] = C_GRID
    """Inverse regularisation strengths tried."""
    seed: int = 42
    """Seed of the solver."""
    C_: float = float("nan")
    """The chosen inverse regularisation strength (after `fit`)."""
    model_: Any = None
    """The fitted scikit-learn pipeline (scaler, logistic regression), after `fit`."""

    def fit(
        self,
        x_train: np.ndarray,
        y_train: np.ndarray,
        x_val: np.ndarray,
        y_val: np.ndarray,
        sample_weight: np.ndarray | None = None,
    ) -> GroundingFloor:
        """Fit on ``x_train: [n, F]`` for every ``C``; keep the best by validation AUROC; returns self."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        def fit(c: float) -> tuple[float, Any]:
            lr = LogisticRegression(C=c, solver="liblinear", class_weight="balanced", random_state=self.seed)
            model = make_pipeline(StandardScaler(), lr)
            model.fit(x_train, y_train, logisticregression__sample_weight=sample_weight)
            return auroc(model.decision_function(x_val), y_val), model

        self.C_, _, self.model_ = best_by_validation(sorted(self.c_grid), fit, tol=1e-12)
        return self

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """``[n] float64`` logits of ``x: [n, F]``; higher means more likely hallucinated."""
        if self.model_ is None:
            raise ValueError("GroundingFloor is not fitted; call fit first")
        return np.asarray(self.model_.decision_function(x), dtype=np.float64)


def floor_scores(ds: Dataset, *, seed: int = 42) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Validation and test scores of both floors on one split dataset, keyed by `FLOORS`.

    The grounding floor is fitted on the training split, ``C`` chosen on validation.

    Returns:
        dict[str, tuple[np.ndarray, np.ndarray]]: ``{name: (validation scores [N_val], test scores
        [N_test])}``, higher = more likely hallucinated.

    Raises:
        ValueError: when the training or validation split lacks one of the labels.
    """
    train, val, test = ds.train, ds.validation, ds.test
    for name, part in (("train", train), ("validation", val)):
        if len(set(part.labels.tolist())) < 2:
            raise ValueError(f"the grounding floor needs both labels in the {name} split of {ds.name!r}")
    x_val, x_test = grounding_matrix(val), grounding_matrix(test)
    fit = GroundingFloor(seed=seed).fit(grounding_matrix(train), train.labels, x_val, val.labels)
    return {
        FLOORS[0]: (overlap_scores(val), overlap_scores(test)),
        FLOORS[1]: (fit.decision_function(x_val), fit.decision_function(x_test)),
    }


def best_floor(aurocs: Mapping[str, float]) -> tuple[str, float] | None:
    """The floor with the highest finite AUROC among ``aurocs`` (method -> AUROC), or None."""
    got = [(name, float(a)) for name, a in aurocs.items() if name in FLOORS and np.isfinite(a)]
    return max(got, key=lambda item: item[1]) if got else None


def _labelled(ds: Dataset) -> bool:
    return len(set(ds.labels.tolist())) == 2


def floor_results(
    ds: Dataset, split: Split = "test", *, n_bootstrap: int = 10_000, seed: int = 42
) -> dict[str, EvalResult]:
    """Both floors scored on one split of ``ds``, with group-bootstrap intervals, keyed by `FLOORS`.

    Thresholds come from the validation split (validation F1) when it has both labels; the overlap
    floor's is otherwise 0.5 (half the answer's content words unsupported). The grounding floor is
    fitted only when the training and validation splits both have both labels; it is left out
    otherwise. A split with one class gets NaN AUROC (`halubench_data.evaluate`).
    """
    part, val = ds.split(split), ds.validation
    out: dict[str, EvalResult] = {}
    y, groups = part.labels, part.groups
    t = float(select_threshold(overlap_scores(val), val.labels)) if _labelled(val) else 0.5
    out[FLOORS[0]] = evaluate(overlap_scores(part), y, groups, t, n_bootstrap=n_bootstrap, seed=seed)
    if _labelled(ds.train) and _labelled(val):
        x_val = grounding_matrix(val)
        fit = GroundingFloor(seed=seed).fit(grounding_matrix(ds.train), ds.train.labels, x_val, val.labels)
        t = float(select_threshold(fit.decision_function(x_val), val.labels))
        scores = fit.decision_function(grounding_matrix(part))
        out[FLOORS[1]] = evaluate(scores, y, groups, t, n_bootstrap=n_bootstrap, seed=seed)
    return out
