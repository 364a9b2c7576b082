"""Every method on several datasets from one feature cache: probes, published detectors, judges, text-only.

The protocol of the paper's evaluation (Section 5.3, Appendix M), on records already extracted:

- `evaluate_dataset`: the feature-set probes (`halluprobe.training.train_feature_sets`), the published
  detectors (`halluprobe.training.published_scores`), any extra scored method (a judge, say) and the
  text-only baselines of ``halubench_data``, each thresholded on validation, scored once on test
  (`halluprobe.evaluation.evaluate_methods`); returns a typed `DatasetRun`.
- `dataset_tests` / `grouped_tests`: paired group-bootstrap tests (block additions, probe vs judge,
  detectors vs text-only baselines), Holm-corrected within each family.
- `cross_task` and `pooled_transfer`: probes (and the published detectors) applied at their own
  validation threshold to other datasets.
- `localisation_runs`: token probes (plain, with context, on richer feature views; the one with the best
  validation span F1 chosen) and the negative log-probability on annotated spans
  (`halluprobe.localisation`); `task_cv_run`: per-task token probes with every choice by
  cross-validation over the training and validation answers.

Nothing here looks at test labels before the final scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from halubench_data import Dataset
from halubench_data.schema import SPLITS

from halluprobe.evaluation._evaluation import (
    DatasetEvaluation,
    MethodScores,
    Metric,
    PairedTest,
    TransferResult,
    evaluate_methods,
    holm_families,
    paired_test,
    transfer,
)
from halluprobe.evaluation._suite_localisation import (  # noqa: F401 (re-exported)
    CONTEXT_NAME,
    LOGPROB_NAME,
    PLAIN,
    PLAIN_NAME,
    TASK_CS,
    TASK_CV_CS,
    TASK_CV_NAME,
    TASK_NAMES,
    VIEW_NAMES,
    _choices,
    _context_probe,
    _pooled_scorer,
    _Scorer,
    _span_f1,
    _span_rows,
    _task_probes,
    localisation_runs,
    task_cv_run,
)
from halluprobe.training._protocol import ProbeFit

__all__ = [
    "ADDITIONS",
    "FEATURE_SETS",
    "TEXT_ONLY_NAMES",
    "TRANSFER_SETS",
    "DatasetRun",
    "cross_task",
    "dataset_tests",
    "evaluate_dataset",
    "grouped_tests",
    "localisation_runs",
    "pooled_transfer",
    "split_labels",
    "split_records",
]

FEATURE_SETS = ("A7", "A64", "H64", "L9", "A7H64", "A64H64", "A7L9", "A64L9", "ALL")
"""Feature-set probes of the main table (``ALL`` = A7 + A64 + H64 + L9)."""
ADDITIONS = (("H64", "A7H64"), ("L9", "A7L9"), ("H64", "A64H64"), ("L9", "A64L9"))
"""Block additions tested with the paired group bootstrap (Holm over the datasets of each addition)."""
TRANSFER_SETS = ("A7", "A64", "H64", "L9", "A64H64", "ALL")
"""Probes evaluated out of their fitting task."""
TEXT_ONLY_NAMES = {"length": "text-only length", "tfidf": "text-only TF-IDF"}
"""Row names of ``halubench_data.text_only_scores``' baselines."""


@dataclass(frozen=True)
class DatasetRun:
    """Everything fitted and scored on one dataset."""

    name: str
    """Dataset name."""
    fits: Mapping[str, ProbeFit]
    """Feature-set probes, by name."""
    evaluation: DatasetEvaluation
    """Every method's scores, thresholds and test metrics."""
    selection: Mapping[str, dict[str, float]]
    """Per probe: ``C``, validation AUROC and the other choices (``K``, ``k``)."""
    best_probe: str
    """The probe with the best validation AUROC (ties: the first of `FEATURE_SETS`)."""
    tests: tuple[PairedTest, ...] = field(default=())
    """Raw paired tests of this dataset (`dataset_tests`; Holm across datasets: `grouped_tests`)."""


def split_records(load: Callable[[list[str]], list], ds: Dataset) -> dict[str, list]:
    """``{split: records}`` of a ``halubench_data.Dataset``; ``load`` maps example ids to records."""
    return {s: load([e.id for e in ds.split(s).examples]) for s in SPLITS}


def split_labels(ds: Dataset) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """``({split: labels int64}, {split: groups as strings})`` of a ``halubench_data.Dataset``."""
    lab: dict[str, np.ndarray] = {}
    grp: dict[str, list[str]] = {}
    for s in SPLITS:
        part = ds.split(s)
        lab[s], grp[s] = np.asarray(part.labels, dtype=np.int64), [str(g) for g in part.groups]
    return lab, grp


def _probability(fit: ProbeFit) -> Callable[[list], np.ndarray]:
    """``records -> [n]`` probability of "hallucinated" (column 1 of ``predict_proba``)."""
    return lambda recs: fit.predict_proba(recs)[:, 1]


def judge_methods(judge: Mapping[str, Any] | None, ds: Dataset) -> list[MethodScores]:
    """The judge of a ``judge.json`` (`halujudge.judge_datasets`) on ``ds`` as a method (validation F1).

    Empty when there is no judge document or it did not score ``ds``.

    Raises:
        ValueError: the document's test ids are not those of ``ds`` (scored on another version of it).
    """
    if not judge or ds.name not in judge["datasets"]:
        return []
    j = judge["datasets"][ds.name]
    if j["test_ids"] != [e.id for e in ds.test.examples]:
        raise ValueError(f"judge test ids of {ds.name} do not match the dataset; score the judge again")
    y_val = np.asarray(ds.validation.labels)
    label = f"SmolLM2 judge ({judge['template']})"
    return [
        MethodScores.chosen_on_validation(label, "judge", j["validation_scores"], j["test_scores"], y_val)
    ]


def pooled_judge(
    judge: Mapping[str, Any] | None, pooled: Sequence[str], targets: Sequence[str]
) -> dict[str, Any] | None:
    """A ``judge.json``'s judge for `pooled_transfer` (validation of ``pooled``, test of ``targets``)."""
    if not judge:
        return None
    j = judge["datasets"]
    return {
        "name": f"SmolLM2 judge ({judge['template']})",
        "validation": np.concatenate([j[t]["validation_scores"] for t in pooled]),
        "scores": {t: j[t]["test_scores"] for t in targets if t in j},
    }


def evaluate_dataset(
    ds: Dataset, records: Mapping[str, list], order: list[int], logit_names: Sequence[str], *,
    extra: Sequence[MethodScores] = (), feature_sets: Sequence[str] = FEATURE_SETS, n_bootstrap: int = 10_000,
    n_paired: int = 100_000,
) -> DatasetRun:  # fmt: skip
    """Fit and score every method of one dataset (in the order probes, detectors, ``extra``, text-only).

    Args:
        ds: A ``halubench_data.Dataset`` with train/validation/test splits.
        records: `split_records` of ``ds``.
        order: Flat head indices ranked by induction score (`halluprobe.rank_heads`).
        logit_names: The records' logit statistic names (``flashstats_hf.LOGIT_STAT_NAMES``).
        extra: Other scored methods of ``ds`` (a judge), thresholds chosen on validation.
        feature_sets: Probes to fit.
        n_bootstrap: Resamples of the test intervals.
        n_paired: Resamples of each paired test (`dataset_tests`); 0 leaves the tests out.
    """
    from halubench_data import text_only_scores

    from halluprobe.detectors._published_fit import published_scores
    from halluprobe.training._protocol import train_feature_sets

    lab, grp = split_labels(ds)
    fits = train_feature_sets(list(feature_sets), order, records["train"], lab["train"], grp["train"],
                              records["validation"], lab["validation"])  # fmt: skip
    methods = [
        MethodScores(n, "probe", _probability(f)(records["validation"]), _probability(f)(records["test"]),
                     f.threshold)
        for n, f in fits.items()
    ]  # fmt: skip
    toha = bool(records["train"] and records["train"][0].mtopdiv.size)
    for name, sc in published_scores(records, lab, order, list(logit_names), toha).items():
        methods.append(
            MethodScores.chosen_on_validation(
                name, "detector", sc["validation"], sc["test"], lab["validation"]
            )
        )
    methods += list(extra)
    for key, (val_s, test_s) in text_only_scores(ds).items():
        methods.append(
            MethodScores.chosen_on_validation(
                TEXT_ONLY_NAMES[key], "text-only", val_s, test_s, lab["validation"]
            )
        )
    ev = evaluate_methods(ds.name, methods, lab["test"], grp["test"], n_bootstrap=n_bootstrap)
    selection = {k: {"C": f.C, "val_auroc": f.val_auroc, **f.selection} for k, f in fits.items()}
    ranked = [s for s in feature_sets if s in fits]
    best = max(ranked, key=lambda s: (fits[s].val_auroc, -ranked.index(s)))
    run = DatasetRun(ds.name, fits, ev, selection, best)
    return run if n_paired <= 0 else replace(run, tests=dataset_tests(run, n_paired))


def dataset_tests(
    run: DatasetRun, n: int = 100_000, *, text_only_on: str = "ragtruth_qa"
) -> tuple[PairedTest, ...]:
    """Raw paired tests of one dataset: block additions (F1, AUROC), probe vs judge, detectors vs text-only.

    Probe vs judge compares the first judge with A64H64 and with `DatasetRun.best_probe`; detectors vs
    the text-only baselines (AUROC) run on the dataset named ``text_only_on`` only.
    """
    ev, rows = run.evaluation, []
    metrics: tuple[Metric, Metric] = ("f1", "auroc")
    for base, full in ADDITIONS:
        for metric in metrics:
            if base in ev.methods and full in ev.methods:
                key = f"{base}->{full}/{metric}"
                rows.append(paired_test(ev, base, full, metric, family="additions", key=key, n=n))
    judges = [m for m, s in ev.methods.items() if s.kind == "judge"]
    for probe in dict.fromkeys(p for p in ("A64H64", run.best_probe) if p in ev.methods) if judges else ():
        for metric in metrics:
            rows.append(paired_test(ev, judges[0], probe, metric, family="probe_vs_judge", key=metric, n=n))
    if run.name == text_only_on:
        for base in ("text-only TF-IDF", "text-only length"):
            for m, s in ev.methods.items():
                if s.kind in ("probe", "detector"):
                    rows.append(paired_test(ev, base, m, "auroc", family="vs_text_only", key=base, n=n))
    return tuple(rows)


def grouped_tests(tests: Sequence[PairedTest]) -> tuple[PairedTest, ...]:
    """Holm within each ``(family, key)``, ordered by family (additions, probe vs judge, vs text-only)."""
    from halluprobe.evaluation._tables import TEST_FAMILIES

    adjusted = holm_families(tests)
    families = [f for f, _ in TEST_FAMILIES]
    keys = list(dict.fromkeys((t.family, t.key) for t in adjusted))
    rank = {
        fk: (families.index(fk[0]) if fk[0] in families else len(families), i) for i, fk in enumerate(keys)
    }
    return tuple(sorted(adjusted, key=lambda t: rank[(t.family, t.key)]))


def _transfer(score, threshold, recs, ds, fit: str, test: str, method: str, n_boot: int) -> TransferResult:
    y, g = np.asarray(ds.labels), [str(x) for x in ds.groups]
    return transfer(score, threshold, recs, y, g, fit=fit, test=test, method=method, n_bootstrap=n_boot)


def cross_task(
    runs: Mapping[str, DatasetRun], datasets: Mapping[str, Any], load: Callable[[list[str]], list],
    tasks: Sequence[str], n_bootstrap: int = 2_000, feature_sets: Sequence[str] = TRANSFER_SETS,
) -> list[TransferResult]:  # fmt: skip
    """Probes fitted on one task (C, threshold, K, k from its validation split) tested on each task's test."""
    rows = []
    tasks = [t for t in tasks if t in runs]
    for tgt in tasks:
        test = datasets[tgt].test
        recs = load([e.id for e in test.examples])
        for src in tasks:
            for fs in feature_sets:
                fit = runs[src].fits[fs]
                rows.append(
                    _transfer(_probability(fit), fit.threshold, recs, test, src, tgt, fs, n_bootstrap)
                )
    return rows


def pooled_transfer(
    pooled: Dataset, targets: Mapping[str, Any], load: Callable[[list[str]], list], order: list[int],
    logit_names: Sequence[str], *, judge: Mapping[str, Any] | None = None, n_bootstrap: int = 2_000,
    feature_sets: Sequence[str] = TRANSFER_SETS,
) -> list[TransferResult]:  # fmt: skip
    """Probes and published detectors fitted on ``pooled`` (paper Appendix M), tested elsewhere.

    They are tested on ``pooled``'s test split and on every example of each target dataset, at the
    pooled-validation thresholds.

    Args:
        pooled: A ``halubench_data.Dataset`` (the RAGTruth tasks concatenated).
        targets: ``{name: Dataset}`` scored whole (claim sets).
        load: Example ids -> records.
        order: Induction head ranking.
        logit_names: The records' logit statistic names.
        judge: ``{"name", "validation": [n_val of pooled], "scores": {target: [n]}}`` to add a judge row.
        n_bootstrap: Resamples of each interval.
        feature_sets: Probes fitted.
    """
    from halubench_data import select_threshold

    from halluprobe.detectors._published_fit import fit_published
    from halluprobe.training._protocol import train_feature_sets

    recs = split_records(load, pooled)
    lab, grp = split_labels(pooled)
    fits = train_feature_sets(list(feature_sets), order, recs["train"], lab["train"], grp["train"],
                              recs["validation"], lab["validation"])  # fmt: skip
    scorers = {n: (_probability(f), f.threshold) for n, f in fits.items()}
    for name, score in fit_published(recs, lab, order, list(logit_names), toha=False).items():
        scorers[name] = (score, float(select_threshold(score(recs["validation"]), lab["validation"])))
    name = pooled.name
    rows = [
        _transfer(sc, thr, recs["test"], pooled.test, name, name, m, n_bootstrap)
        for m, (sc, thr) in scorers.items()
    ]
    jthr = float(select_threshold(np.asarray(judge["validation"]), lab["validation"])) if judge else None
    for tgt, ds in targets.items():
        recs_t = load([e.id for e in ds.examples])
        rows += [
            _transfer(sc, thr, recs_t, ds, name, tgt, m, n_bootstrap) for m, (sc, thr) in scorers.items()
        ]
        if judge and tgt in judge["scores"]:
            s = np.asarray(judge["scores"][tgt])
            rows.append(_transfer(lambda _, s=s: s, jthr, None, ds, name, tgt, judge["name"], n_bootstrap))
    return rows
