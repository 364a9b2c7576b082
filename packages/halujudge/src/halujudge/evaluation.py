"""The paper's selection protocol for judges and checkers, and their evaluation with the shared metrics.

* Template (LLM judges only): the template with the highest mean validation AUROC, the mean taken over the
  selection datasets (the paper: the validation splits of its three training datasets). Ties go to the
  template listed first.
* Threshold: the score that maximises F1 on the validation split of the evaluated dataset (ties toward the
  higher threshold, ``halubench_data.select_threshold``).
* Test: F1, AUROC, precision and recall at that threshold with group-bootstrap intervals
  (``halubench_data.evaluate``), the same [`EvalResult`][halubench_data.EvalResult] as halluprobe reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from halubench_data import Dataset, EvalResult, auroc, evaluate, select_threshold

from halujudge.cache import ScoreCache
from halujudge.judge import LLMJudge
from halujudge.prompt import list_templates

__all__ = ["JudgeRun", "Scorer", "TemplateSelection", "run_evaluation", "select_template"]


class Scorer(Protocol):
    """Scores examples: [`LLMJudge`][halujudge.LLMJudge], [`MiniCheck`][halujudge.MiniCheck] and the like."""

    def score(
        self, examples: Sequence[Any], cache: ScoreCache | None = None, progress: bool = True
    ) -> np.ndarray:
        """scores: [N] float64. Higher = more likely hallucinated."""
        ...


@dataclass(frozen=True)
class TemplateSelection:
    """The outcome of choosing a judge template by mean validation AUROC."""

    template: str
    """The chosen template."""
    mean_auroc: float
    """Its mean validation AUROC over the selection datasets."""
    aurocs: dict[str, dict[str, float]] = field(default_factory=dict)
    """Validation AUROC per template, then per selection dataset."""


@dataclass(frozen=True)
class JudgeRun:
    """A judge's or checker's scores, selections and test metrics on one dataset."""

    method: str
    """Row name in tables, e.g. ``"SmolLM2-135M-Instruct / claims"``."""
    dataset: str
    """Name of the evaluated dataset."""
    threshold: float
    """Chosen by validation F1."""
    result: EvalResult
    """Test metrics at ``threshold`` with bootstrap intervals."""
    test_ids: list[str]
    """Ids of the test examples, in the order of ``test_scores``."""
    test_scores: np.ndarray
    """test_scores: [N_test] float64. Higher = more likely hallucinated."""
    validation_scores: np.ndarray
    """validation_scores: [N_val] float64."""
    selection: TemplateSelection | None = None
    """How the template was chosen (LLM judges with ``template="auto"``)."""


def _require_both_labels(data: Dataset, what: str) -> None:
    labels = data.labels
    if len(data) == 0 or labels.min() == labels.max():
        raise ValueError(
            f"{what} of {data.name!r} needs both hallucinated and supported examples "
            f"(has {int(labels.sum())} hallucinated of {len(data)})"
        )


def select_template(
    judge: LLMJudge,
    selection: Sequence[Dataset],
    templates: Sequence[str] | None = None,
    cache: ScoreCache | None = None,
    progress: bool = True,
) -> TemplateSelection:
    """Choose the judge template with the highest mean validation AUROC over the selection datasets.

    Args:
        judge: the judge; its model is reused with each template.
        selection: datasets whose ``validation`` split is scored (each needs both labels there).
        templates: candidate names, in tie-break order; default all shipped templates.
        cache: optional score cache.
        progress: show progress bars.

    Raises:
        ValueError: if ``selection`` is empty or a validation split lacks a label.
    """
    if not selection:
        raise ValueError("select_template needs at least one selection dataset")
    for data in selection:
        _require_both_labels(data.validation, "the validation split")
    names = list(templates) if templates is not None else list_templates()
    table: dict[str, dict[str, float]] = {}
    for name in names:
        candidate = judge.with_template(name)
        table[name] = {
            data.name: auroc(
                candidate.score(data.validation.examples, cache, progress), data.validation.labels
            )
            for data in selection
        }
    means = {name: float(np.mean(list(per.values()))) for name, per in table.items()}
    best = max(names, key=lambda n: (means[n], -names.index(n)))
    return TemplateSelection(template=best, mean_auroc=means[best], aurocs=table)


def run_evaluation(
    scorer: Scorer,
    dataset: Dataset,
    method: str,
    cache: ScoreCache | None = None,
    n_bootstrap: int = 10_000,
    progress: bool = True,
    selection: TemplateSelection | None = None,
) -> JudgeRun:
    """Threshold by validation F1, then test metrics with group-bootstrap intervals.

    Args:
        scorer: a judge (its template already fixed) or a checker.
        dataset: with ``validation`` and ``test`` splits.
        method: row name for tables.
        cache: optional score cache.
        n_bootstrap: bootstrap resamples of test groups.
        progress: show progress bars.
        selection: the template selection that produced ``scorer``, recorded in the result.

    Raises:
        ValueError: if the validation split lacks hallucinated examples or the test split is empty.
    """
    validation, test = dataset.validation, dataset.test
    if not any(validation.labels == 1):
        raise ValueError(
            f"validation split of {dataset.name!r} has no hallucinated example to set a threshold"
        )
    if len(test) == 0:
        raise ValueError(f"test split of {dataset.name!r} is empty")
    val_scores = scorer.score(validation.examples, cache, progress)
    threshold = select_threshold(val_scores, validation.labels)
    test_scores = scorer.score(test.examples, cache, progress)
    result = evaluate(test_scores, test.labels, test.groups, threshold, n_bootstrap=n_bootstrap)
    return JudgeRun(
        method=method,
        dataset=dataset.name,
        threshold=threshold,
        result=result,
        test_ids=[e.id for e in test.examples],
        test_scores=test_scores,
        validation_scores=val_scores,
        selection=selection,
    )


def judge_datasets(
    judge: LLMJudge,
    selection: Sequence[Dataset],
    datasets: Sequence[Dataset],
    test_only: Sequence[Dataset] = (),
    cache: ScoreCache | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """One judge over many datasets: its template chosen on ``selection``, then every dataset scored.

    The template is `select_template`'s (mean validation AUROC over ``selection``); each of
    ``datasets`` then gets `run_evaluation` (threshold by validation F1, test scores), and each of
    ``test_only`` (datasets without labelled validation, such as claim sets) its scores alone.

    Returns:
        The JSON-ready document of the run, with the chosen ``template``, its ``mean_auroc`` and every
        template's ``aurocs``, and under ``datasets`` each dataset's ``threshold``, ``test_ids``,
        ``test_scores`` and ``validation_scores`` (those of ``test_only``: ``test_ids`` and
        ``test_scores`` over all their examples).
    """
    sel = select_template(judge, selection, cache=cache, progress=progress)
    chosen = judge.with_template(sel.template)
    out: dict[str, Any] = {"template": sel.template, "mean_auroc": sel.mean_auroc, "aurocs": sel.aurocs}
    out["datasets"] = {}
    for data in datasets:
        run = run_evaluation(chosen, data, f"judge ({sel.template})", cache, progress=progress, selection=sel)
        out["datasets"][data.name] = {
            "threshold": run.threshold, "test_ids": run.test_ids, "test_scores": run.test_scores.tolist(),
            "validation_scores": run.validation_scores.tolist(),
        }  # fmt: skip
    for data in test_only:
        scores = chosen.score(data.examples, cache, progress)
        out["datasets"][data.name] = {"test_ids": [e.id for e in data], "test_scores": scores.tolist()}
    return out
