"""Evaluation of many methods: typed results, paired group bootstrap with Holm families, transfer.

The protocol (paper Section 5.3): every method brings validation and test scores (higher = more
likely hallucinated) and a threshold chosen on validation only; `evaluate_methods` scores the
test split of one dataset with group-bootstrap intervals (``halubench_data.evaluate``). Paired tests
(`paired_test`) resample the test groups once for both methods; `holm_families` corrects
each family of tests (one comparison and metric over datasets, say) with Holm's step-down method.
`transfer` applies a method fitted on one dataset, at its own validation threshold, to another
dataset's test split (paper Appendix M). `write_results` writes ``results.json``,
``results.md`` and ROC / precision-recall plots.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
from halubench_data.files import atomic_write_text
from halubench_data.metrics import (
    EvalResult,
    evaluate,
    holm,
    paired_bootstrap,
    results_table,
    select_threshold,
)

from halluprobe.evaluation._transfer_table import TransferTable

__all__ = [
    "DatasetEvaluation",
    "MethodScores",
    "PairedTest",
    "TransferResult",
    "TransferTable",
    "evaluate_methods",
    "holm_families",
    "paired_test",
    "results_document",
    "transfer",
    "write_results",
]

Kind = Literal["probe", "detector", "judge", "text-only", "floor"]
Metric = Literal["f1", "auroc", "precision", "recall"]


@dataclass(frozen=True)
class MethodScores:
    """One method's scores on one dataset and its validation-chosen threshold."""

    name: str
    """Row name, e.g. ``"A64H64"``, ``"LookbackLens"``, ``"text-only TF-IDF"``."""
    kind: Kind
    """``probe`` (a feature-set probe), ``detector`` (a published one), ``judge``, ``text-only`` or
    ``floor`` (a grounding floor, `halubench_data.floors`)."""
    validation: np.ndarray
    """``[N_val] float64``: validation scores (higher = more likely hallucinated)."""
    test: np.ndarray
    """``[N_test] float64``: test scores."""
    threshold: float
    """Hallucinated when ``score >= threshold``; chosen on validation."""

    @classmethod
    def chosen_on_validation(
        cls, name: str, kind: Kind, validation: np.ndarray, test: np.ndarray, y_validation: np.ndarray
    ) -> MethodScores:
        """Scores with the threshold that maximises validation F1 (``halubench_data.select_threshold``)."""
        validation = np.asarray(validation, dtype=np.float64)
        threshold = float(select_threshold(validation, np.asarray(y_validation)))
        return cls(name, kind, validation, np.asarray(test, dtype=np.float64), threshold)


@dataclass(frozen=True)
class DatasetEvaluation:
    """Every method's test metrics on one dataset."""

    dataset: str
    """Dataset name."""
    y_test: np.ndarray
    """``[N_test] int64``: test labels (1 = hallucinated)."""
    groups_test: tuple[str, ...]
    """Test groups, the bootstrap units."""
    methods: Mapping[str, MethodScores]
    """Scores and thresholds, by method name, in the order given."""
    results: Mapping[str, EvalResult]
    """Test metrics with group-bootstrap intervals, by method name."""


@dataclass(frozen=True)
class PairedTest:
    """A paired group-bootstrap comparison ``metric(b) - metric(a)`` on one dataset's test split."""

    family: str
    """Holm family, e.g. ``"additions"``."""
    key: str
    """Sub-family: tests sharing ``(family, key)`` are corrected together, e.g. ``"H64->A7H64/f1"``."""
    dataset: str
    """Dataset name."""
    a: str
    """Baseline method."""
    b: str
    """Compared method."""
    metric: Metric
    """Compared metric."""
    delta: float
    """Observed ``metric(b) - metric(a)``."""
    ci: tuple[float, float]
    """Percentile bootstrap interval of the difference."""
    p: float
    """Two-sided bootstrap p-value."""
    p_holm: float | None = None
    """Holm-adjusted p-value within the family (`holm_families`)."""


@dataclass(frozen=True)
class TransferResult:
    """A method fitted (and thresholded) on one dataset, tested on another."""

    fit: str
    """Dataset the method was fitted and thresholded on."""
    test: str
    """Dataset whose test split (or all examples) was scored."""
    method: str
    """Method name."""
    result: EvalResult
    """Test metrics at the fitting dataset's threshold."""


def evaluate_methods(
    dataset: str,
    methods: Iterable[MethodScores],
    y_test: np.ndarray,
    groups_test: Sequence[str],
    *,
    n_bootstrap: int = 10_000,
    seed: int = 42,
) -> DatasetEvaluation:
    """Test metrics of every method at its validation threshold, with group-bootstrap intervals.

    Raises:
        ValueError: when two methods share a name or a method's test scores do not match ``y_test``.
    """
    y = np.asarray(y_test, dtype=np.int64)
    by_name: dict[str, MethodScores] = {}
    for m in methods:
        if m.name in by_name:
            raise ValueError(f"two methods are named {m.name!r}")
        if len(m.test) != len(y):
            raise ValueError(f"{m.name}: {len(m.test)} test scores for {len(y)} test labels")
        by_name[m.name] = m
    groups = tuple(str(g) for g in groups_test)
    results = {
        name: evaluate(m.test, y, list(groups), m.threshold, n_bootstrap=n_bootstrap, seed=seed)
        for name, m in by_name.items()
    }
    return DatasetEvaluation(dataset, y, groups, by_name, results)


def paired_test(
    ev: DatasetEvaluation, a: str, b: str, metric: Metric, *, family: str, key: str | None = None,
    n: int = 100_000, seed: int = 42,
) -> PairedTest:  # fmt: skip
    """Paired group bootstrap of ``metric(b) - metric(a)`` (thresholds: each method's own, not for AUROC).

    Raises:
        KeyError: when ``a`` or ``b`` is not a method of ``ev``.
    """
    ma, mb = ev.methods[a], ev.methods[b]
    thresholds = None if metric == "auroc" else (ma.threshold, mb.threshold)
    res = paired_bootstrap(
        ma.test, mb.test, ev.y_test, list(ev.groups_test), metric, n=n, seed=seed, thresholds=thresholds
    )
    return PairedTest(
        family, key or f"{a}->{b}/{metric}", ev.dataset, a, b, metric, res.delta, res.ci, res.p_value
    )


def holm_families(tests: Iterable[PairedTest]) -> tuple[PairedTest, ...]:
    """Every test with ``p_holm`` set by Holm's method within its ``(family, key)``; order kept."""
    tests = list(tests)
    adjusted: dict[int, float] = {}
    for fam in dict.fromkeys((t.family, t.key) for t in tests):
        idx = [i for i, t in enumerate(tests) if (t.family, t.key) == fam]
        adjusted.update(zip(idx, holm([tests[i].p for i in idx]).tolist(), strict=True))
    return tuple(replace(t, p_holm=float(adjusted[i])) for i, t in enumerate(tests))


def transfer(
    score: Callable[[Sequence], np.ndarray], threshold: float, inputs: Sequence, y: np.ndarray,
    groups: Sequence[str], *, fit: str, test: str, method: str, n_bootstrap: int = 10_000, seed: int = 42,
) -> TransferResult:  # fmt: skip
    """Score another dataset's examples with a fitted method at its own (fitting dataset's) threshold.

    Args:
        score: the fitted method: inputs (e.g. records) -> ``[n]`` scores, higher = more hallucinated.
        threshold: chosen on the fitting dataset's validation split.
        inputs: the target examples' inputs, in the order of ``y``.
        y: ``[n]`` target labels.
        groups: target groups (bootstrap units).
        fit: name of the fitting dataset.
        test: name of the target dataset.
        method: method name.
        n_bootstrap: resamples.
        seed: bootstrap seed.
    """
    s = np.asarray(score(inputs), dtype=np.float64)
    res = evaluate(s, np.asarray(y), [str(g) for g in groups], threshold, n_bootstrap=n_bootstrap, seed=seed)
    return TransferResult(fit, test, method, res)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def results_document(
    evaluations: Sequence[DatasetEvaluation],
    tests: Sequence[PairedTest] = (),
    transfers: Sequence[TransferResult] = (),
    extra: Mapping[str, object] | None = None,
) -> dict:
    """The JSON-ready document of `write_results` (NaN written as ``null``)."""
    doc = {
        "format": 1,
        "scores": "higher means more likely hallucinated; hallucinated when score >= threshold",
        "datasets": {
            ev.dataset: {
                "n_test": len(ev.y_test),
                "methods": {
                    name: {"kind": ev.methods[name].kind, **asdict(res)} for name, res in ev.results.items()
                },
            }
            for ev in evaluations
        },
        "paired_tests": [asdict(t) for t in tests],
        "transfer": [
            {"fit": t.fit, "test": t.test, "method": t.method, **asdict(t.result)} for t in transfers
        ],
        **(dict(extra) if extra else {}),
    }
    return _clean(doc)


def _markdown(evaluations, tests, transfers) -> str:
    lines = ["Test F1 at the validation-F1 threshold and test AUROC, with 95% group-bootstrap intervals.", ""]
    for ev in evaluations:
        lines += [f"## {ev.dataset}", "", results_table(dict(ev.results)), ""]
    if tests:
        lines += ["## Paired tests (group bootstrap, Holm within each family)", ""]
        lines += [
            "| family | dataset | comparison | metric | Δ | 95% CI | p | p (Holm) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in tests:
            holm_p = "-" if t.p_holm is None else f"{t.p_holm:.4f}"
            lines.append(
                f"| {t.family} | {t.dataset} | {t.a} → {t.b} | {t.metric} | {t.delta:+.3f} | "
                f"[{t.ci[0]:+.3f}, {t.ci[1]:+.3f}] | {t.p:.4f} | {holm_p} |"
            )
        lines.append("")
    if transfers:
        lines += ["## Transfer (fitted and thresholded on one dataset, tested on another)", ""]
        rows = [(f"{t.method}: {t.fit} → {t.test}", t.result) for t in transfers]
        lines += [results_table(rows), ""]
    return "\n".join(lines)


def write_results(
    out: str | Path,
    evaluations: Sequence[DatasetEvaluation],
    tests: Sequence[PairedTest] = (),
    transfers: Sequence[TransferResult] = (),
    *,
    extra: Mapping[str, object] | None = None,
    plots: bool = True,
) -> Path:
    """Write ``out/results.json``, ``out/results.md`` and per-dataset plots; returns the JSON path.

    With ``plots``, every dataset whose test split has both labels gets ``out/<dataset>-roc.png`` and
    ``out/<dataset>-pr.png``. Every file is written atomically.
    """
    from halluprobe.evaluation._report import plot_curves

    out = Path(out)
    doc = results_document(evaluations, tests, transfers, extra)
    path = atomic_write_text(out / "results.json", json.dumps(doc, indent=1) + "\n", overwrite=True)
    atomic_write_text(out / "results.md", _markdown(evaluations, tests, transfers), overwrite=True)
    if plots:
        for ev in (e for e in evaluations if len(set(e.y_test.tolist())) == 2):
            test_scores = {name: m.test for name, m in ev.methods.items()}
            plot_curves(out, test_scores, ev.y_test, prefix=f"{ev.dataset}-")
    return path
