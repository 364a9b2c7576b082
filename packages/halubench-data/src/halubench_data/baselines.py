"""Text-only baselines (paper Appendix K): how much the answer alone reveals about the label.

Both baselines see only the answer, never the context or question. A benchmark on which they score
well can be solved without checking the answer against its context.

* **Length**: the answer length in words. The direction (longer or shorter = hallucinated) is the
  one with the higher validation AUROC (ties: longer), the threshold maximises validation F1.
* **TF-IDF**: word unigrams and bigrams of the answer, fitted on the training answers, into an
  L2-regularised logistic regression (liblinear, balanced class weights). ``C`` from
  ``{0.001, 0.01, 0.1, 1, 10}`` maximises validation AUROC (ties: the smaller ``C``), and the
  threshold maximises validation F1 (ties: the higher threshold). Not refit on train + validation.

Scores: higher means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .dataset import Dataset
from .metrics import C_GRID, EvalResult, auroc, best_by_validation, evaluate, select_threshold


def _splits(ds: Dataset) -> tuple[Dataset, Dataset, Dataset]:
    train, val, test = ds.train, ds.validation, ds.test
    for name, part in (("train", train), ("validation", val), ("test", test)):
        y = part.labels
        if y.size == 0 or y.min() == y.max():
            raise ValueError(f"text-only baselines need both labels in the {name} split of {ds.name!r}")
    return train, val, test


def answer_lengths(ds: Dataset) -> np.ndarray:
    """lengths: [N] int64. Answer length in whitespace-separated words."""
    return np.array([len(ex.answer.split()) for ex in ds], dtype=np.int64)


def length_baseline(ds: Dataset, *, n_bootstrap: int = 10_000, seed: int = 42) -> EvalResult:
    """Answer length alone: direction and threshold chosen on validation, scored on test.

    Raises:
        ValueError: when a split lacks one of the labels.
    """
    _, val, test = _splits(ds)
    v_len = answer_lengths(val).astype(np.float64)
    sign = 1.0 if auroc(v_len, val.labels) >= 0.5 else -1.0
    threshold = select_threshold(sign * v_len, val.labels)
    t_len = sign * answer_lengths(test).astype(np.float64)
    return evaluate(t_len, test.labels, test.groups, threshold, n_bootstrap=n_bootstrap, seed=seed)


def tfidf_scores(
    ds: Dataset, *, c_grid: Sequence[float] = C_GRID, seed: int = 42
) -> tuple[np.ndarray, np.ndarray, float]:
    """Fit the answer-only TF-IDF model; return validation scores, test scores and the chosen ``C``.

    Returns:
        val_scores: [N_val] float64. P(hallucinated) from the answer alone.
        test_scores: [N_test] float64.
        c: the regularisation strength chosen by validation AUROC.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    train, val, test = _splits(ds)
    vec = TfidfVectorizer(ngram_range=(1, 2))
    x_train = vec.fit_transform(train.answers)
    x_val, x_test = vec.transform(val.answers), vec.transform(test.answers)

    def fit(c: float) -> tuple[float, LogisticRegression]:
        model = LogisticRegression(C=c, solver="liblinear", class_weight="balanced", random_state=seed)
        model.fit(x_train, train.labels)
        return auroc(model.predict_proba(x_val)[:, 1], val.labels), model

    c, _, model = best_by_validation(sorted(c_grid), fit, tol=1e-12)
    return model.predict_proba(x_val)[:, 1], model.predict_proba(x_test)[:, 1], c


def tfidf_baseline(
    ds: Dataset, *, c_grid: Sequence[float] = C_GRID, n_bootstrap: int = 10_000, seed: int = 42
) -> EvalResult:
    """TF-IDF (word 1-2-grams) on the answer alone with a class-balanced L2 logistic regression.

    Raises:
        ValueError: when a split lacks one of the labels.
    """
    val_scores, test_scores, _ = tfidf_scores(ds, c_grid=c_grid, seed=seed)
    threshold = select_threshold(val_scores, ds.validation.labels)
    test = ds.test
    return evaluate(test_scores, test.labels, test.groups, threshold, n_bootstrap=n_bootstrap, seed=seed)


def text_only_scores(ds: Dataset, *, seed: int = 42) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Validation and test scores of both baselines, keyed ``"length"`` and ``"tfidf"``.

    The length score is signed by the direction chosen on validation; each baseline's threshold is
    then the validation-F1 one (``select_threshold``), as in `length_baseline` and
    `tfidf_baseline`.

    Returns:
        dict[str, tuple[np.ndarray, np.ndarray]]: ``{name: (validation scores [N_val], test scores
        [N_test])}``, higher = more likely hallucinated.
    """
    _, val, test = _splits(ds)
    v_len = answer_lengths(val).astype(np.float64)
    sign = 1.0 if auroc(v_len, val.labels) >= 0.5 else -1.0
    tf_val, tf_test, _ = tfidf_scores(ds, seed=seed)
    return {
        "length": (sign * v_len, sign * answer_lengths(test).astype(np.float64)),
        "tfidf": (tf_val, tf_test),
    }


def text_only_baselines(ds: Dataset, *, n_bootstrap: int = 10_000, seed: int = 42) -> dict[str, EvalResult]:
    """Both baselines on one dataset, keyed ``"length"`` and ``"tfidf"``."""
    return {
        "length": length_baseline(ds, n_bootstrap=n_bootstrap, seed=seed),
        "tfidf": tfidf_baseline(ds, n_bootstrap=n_bootstrap, seed=seed),
    }
