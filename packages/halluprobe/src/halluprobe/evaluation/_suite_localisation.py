"""Token-level localisation in the evaluation suite: the token probes compared on the span metric.

`localisation_runs` fits the plain, context and per-view token probes (and the log-probability baseline)
and scores their character spans on test; `task_cv_run` the per-task probes chosen by cross-validation.
Part of `halluprobe.evaluation`'s many-dataset suite (`halluprobe.evaluation._suite`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from halubench_data.schema import SPLITS

PLAIN: dict[str, tuple[int, ...]] = {"windows": (0,), "smooths": (0,), "gaps": (0,)}
"""The plain token probe: the token's own features, no smoothing, no gap merging."""
PLAIN_NAME = "token probe (attention + logits)"
CONTEXT_NAME = "token probe + context, smoothing, gap merging"
VIEW_NAMES: dict[str, str] = {
    "mean+hidden": "token probe + hidden state + context, smoothing, gap merging",
    "heads": "token probe (every head) + context, smoothing, gap merging",
    "heads+hidden": "token probe (every head) + hidden state + context, smoothing, gap merging",
}
"""Row names of the probes on the other feature views (`halluprobe.features.TOKEN_VIEWS`)."""
LOGPROB_NAME = "negative log-probability"
TASK_NAMES: dict[str, str] = {
    "mean": "token probes per task + context, smoothing, gap merging",
    "mean+hidden": "token probes per task + hidden state + context, smoothing, gap merging",
}
"""Row names of the per-task token probes, by the feature view they read."""
TASK_CS: tuple[float, ...] = (0.0001, 0.0003, 0.001, 0.003)
"""``C`` grid of the per-task token probes: each task has a third of the pooled training tokens, and the
pooled probes chose ``C`` at the low end of `halluprobe.localisation.TOKEN_CS` (0.0003-0.003, RAGTruth)."""


_Scorer = tuple[Callable[[str, Any], Any], float, Callable[[str], int], Sequence[Any]]
"""A localisation scorer: (scores of ``(task, features)``, threshold, gap of a task, test items)."""


def _context_probe(plain, train, val, max_tokens: int, cs: Sequence[float] | None = None):
    """`fit_token_probe`'s window search over ``WINDOWS`` reusing the fitted plain (window 0) probe.

    The window with the better validation token AUROC is kept (ties: window 0), then ``smooth``, ``gap``
    and the threshold are chosen by validation span F1 (`choose_decoding`). ``cs``: the ``C`` grid
    (default `halluprobe.localisation.TOKEN_CS`).
    """
    from halluprobe.localisation._localisation import TOKEN_CS, WINDOWS, choose_decoding, fit_token_probe

    wide = fit_token_probe(
        train, val, cs=TOKEN_CS if cs is None else cs, windows=[w for w in WINDOWS if w > 0],
        max_train_tokens=max_tokens, view=plain.view,
    )  # fmt: skip
    if wide.val_auroc > plain.val_auroc + 1e-12:
        return wide
    sm, gap, thr, _ = choose_decoding(val, [plain.decision_function(e.features) for e in val])
    return replace(plain, smooth=sm, gap=gap, threshold=thr)


def localisation_runs(
    split: Mapping[str, Sequence[tuple[str, Any]]], logprob_column: int, tasks: Sequence[str], *,
    n_bootstrap: int = 500, context_tokens: int = 100_000,
    views: Mapping[str, Mapping[str, Sequence[tuple[str, Any]]]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Token probes (plain; with context and decoding searched; other views) and the negative log-probability.

    Every token probe is fitted on train with ``C``, window and decoding chosen on validation; with more
    than one task, one probe per task (`TaskTokenProbes`, on ``"mean+hidden"`` when that view is given)
    is one more scorer, its validation span F1 pooled over the tasks at each task's own decoding. The
    scorer with the best validation span F1 is the run's ``"chosen"`` one. The test split is scored once.

    Args:
        split: ``{"train" | "validation" | "test": [(task, TokenExample), ...]}`` of the ``"mean"`` view.
        logprob_column: Feature column of the answer token's log-probability (in ``split``'s features).
        tasks: Tasks scored one by one after the pooled ``"all"``.
        n_bootstrap: Resamples of the intervals.
        context_tokens: Training tokens (a seeded sample) of the wider view (three times the features):
            fewer than the plain probe's 200,000, to bound the time.
        views: More feature views, ``{view: split}`` with the same examples in the same order (keys of
            `VIEW_NAMES`); each gets a probe with its window and decoding searched.

    Returns:
        dict[str, Any]: ``{"fit": {name: choices}, "chosen": name, "n_features": F, "results": [rows:
        method, task, SpanResult fields]}``.
    """
    from halluprobe.localisation._localisation import (
        choose_span_threshold,
        fit_token_probe,
        span_counts,
        span_prf,
    )

    train, val = [e for _, e in split["train"]], [e for _, e in split["validation"]]
    plain = fit_token_probe(
        train, val, windows=PLAIN["windows"], smooths=PLAIN["smooths"], gaps=PLAIN["gaps"]
    )
    probes = {PLAIN_NAME: plain, CONTEXT_NAME: _context_probe(plain, train, val, context_tokens)}
    tests = dict.fromkeys(probes, split["test"])
    for view, vsplit in (views or {}).items():
        if view not in VIEW_NAMES:
            raise ValueError(
                f"unknown token view {view!r} for localisation_runs; expected one of {list(VIEW_NAMES)}"
            )
        if [len(vsplit[s]) for s in SPLITS] != [len(split[s]) for s in SPLITS]:
            raise ValueError(f"view {view!r} must hold the same examples as the 'mean' split")
        vt, vv = [e for _, e in vsplit["train"]], [e for _, e in vsplit["validation"]]
        vplain = fit_token_probe(
            vt, vv, windows=PLAIN["windows"], smooths=PLAIN["smooths"], gaps=PLAIN["gaps"], view=view
        )
        probes[VIEW_NAMES[view]] = _context_probe(vplain, vt, vv, context_tokens)
        tests[VIEW_NAMES[view]] = vsplit["test"]
    fit = {}
    for name, p in probes.items():
        vsplit = split if p.view == "mean" else views[p.view]  # type: ignore[index]
        vv = [e for _, e in vsplit["validation"]]
        f1 = _span_f1(p, vv)
        fit[name] = {**_choices(p), "view": p.view, "val_span_f1": f1}
    methods: dict[str, _Scorer] = {n: _pooled_scorer(p, tests[n]) for n, p in probes.items()}
    if len(tasks) > 1:  # one probe per task on the richest view given, read as one scorer
        view = "mean+hidden" if "mean+hidden" in (views or {}) else "mean"
        tsplit = split if view == "mean" else views[view]  # type: ignore[index]
        per_task = _task_probes(tsplit, tasks, view, context_tokens)
        name = TASK_NAMES[view]
        tv = tsplit["validation"]
        counts = span_counts(
            [e for _, e in tv], [per_task.scores(t, e.features) for t, e in tv], 0.0,
            [per_task.gap(t) for t, _ in tv],
        )  # fmt: skip
        fit[name] = {"view": view, "val_span_f1": float(span_prf(counts.sum(0))[2]),
                     "tasks": {t: _choices(p) for t, p in per_task.probes.items()}}  # fmt: skip
        methods[name] = (per_task.scores, 0.0, per_task.gap, tsplit["test"])
    chosen = max(fit, key=lambda n: (fit[n]["val_span_f1"], -list(fit).index(n)))
    for name in fit:
        fit[name]["chosen"] = name == chosen

    def lp(task: str, features: Any) -> Any:
        return -features[:, logprob_column]

    def no_gap(task: str) -> int:
        return 0

    lp_thr = choose_span_threshold(val, [lp("", e.features) for e in val])
    methods[LOGPROB_NAME] = (lp, lp_thr, no_gap, split["test"])
    out: dict[str, Any] = {"fit": fit, "chosen": chosen, "n_features": int(train[0].features.shape[1]),
                           "results": []}  # fmt: skip
    for name, scorer in methods.items():
        out["results"] += _span_rows(name, scorer, tasks, n_bootstrap)
    return out


def _span_rows(name: str, scorer: _Scorer, tasks: Sequence[str], n_bootstrap: int) -> list[dict[str, Any]]:
    """One result row of a scorer on its test items pooled (``"all"``) and on each task."""
    from halluprobe.localisation._localisation import evaluate_spans

    fn, thr, gap, test = scorer
    rows = []
    for task in ("all", *tasks):
        items = [(t, e) for t, e in test if task in ("all", t)]
        res = evaluate_spans(
            [e for _, e in items], [fn(t, e.features) for t, e in items], thr,
            n_bootstrap=n_bootstrap, gap=[gap(t) for t, _ in items],
        )  # fmt: skip
        row = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(res).items()}
        rows.append({"method": name, "task": task, **row})
    return rows


TASK_CV_NAME = "token probes per task + hidden state + context, smoothing, gap merging, choices by 5-fold CV"
"""Row name of `task_cv_run`'s scorer (on the ``"mean+hidden"`` view, the default folds)."""
TASK_CV_CS: tuple[float, ...] = (0.00001, 0.00003, 0.0001, 0.0003)
"""``C`` grid of `task_cv_run`: on RAGTruth the per-task probes chose the smallest of `TASK_CS` (0.0001)
for every task, and on the CPU development runs (training split cross-validated, scored on validation)
the out-of-fold AUROC rose further down to 0.00003."""


def task_cv_run(
    split: Mapping[str, Sequence[tuple[str, Any]]], tasks: Sequence[str], *, view: str = "mean+hidden",
    folds: int = 5, n_bootstrap: int = 500, context_tokens: int = 100_000,
    cs: Sequence[float] = TASK_CV_CS, windows: Sequence[int] = (4,),
) -> dict[str, Any]:  # fmt: skip
    """One token probe per task with every choice by group cross-validation over train + validation.

    Each task's probe is `halluprobe.localisation.fit_token_probe_cv` on that task's training and
    validation answers together (``C`` in ``cs``, window in ``windows``: by default the context window
    4 that validation chose for every context probe of the RAGTruth runs), read as one scorer
    (`TaskTokenProbes`) and scored once on the test split, pooled and per task.

    Args:
        split: ``{"train" | "validation" | "test": [(task, TokenExample), ...]}`` of the feature ``view``.
        tasks: The tasks (each needs ``folds`` groups in its training and validation answers).
        view: The `halluprobe.features.TOKEN_VIEWS` entry of ``split``'s features.
        folds: Cross-validation folds.
        n_bootstrap: Resamples of the intervals.
        context_tokens: At most this many tokens (a seeded sample) fit each probe.
        cs: ``C`` grid, ascending.
        windows: Context windows searched.

    Returns:
        dict[str, Any]: ``{"fit": {name: {"view", "folds", "tasks": {task: choices}}}, "results": [rows]}`` in
        `localisation_runs`'s row format; ``val_token_auroc`` of each task is its out-of-fold AUROC.
    """
    from halluprobe.localisation._localisation import TaskTokenProbes, fit_token_probe_cv

    name = (
        TASK_CV_NAME
        if (view, folds) == ("mean+hidden", 5)
        else f"token probes per task ({view}), {folds}-fold CV"
    )
    probes = {}
    for task in tasks:
        seen = [e for s in ("train", "validation") for t, e in split[s] if t == task]
        probes[task] = fit_token_probe_cv(
            seen, folds=folds, cs=cs, windows=windows, max_train_tokens=context_tokens, view=view
        )
    per_task = TaskTokenProbes(probes)
    fit = {name: {"view": view, "folds": folds, "tasks": {t: _choices(p) for t, p in probes.items()}}}
    scorer: _Scorer = (per_task.scores, 0.0, per_task.gap, split["test"])
    return {"fit": fit, "results": _span_rows(name, scorer, tasks, n_bootstrap)}


def _choices(probe) -> dict[str, Any]:
    """What validation chose for a token probe (``C``, window, decoding) and its validation token AUROC."""
    return {"C": probe.C, "val_token_auroc": probe.val_auroc, "window": probe.window, "smooth": probe.smooth,
            "gap": probe.gap, "threshold": probe.threshold}  # fmt: skip


def _pooled_scorer(probe, test: Sequence[Any]) -> _Scorer:
    """One token probe read the same way for every task."""

    def scores(task: str, features: Any) -> Any:
        return probe.decision_function(features)

    def gap(task: str) -> int:
        return int(probe.gap)

    return scores, float(probe.threshold), gap, test


def _task_probes(split, tasks: Sequence[str], view: str, context_tokens: int):
    """`TaskTokenProbes`: per task, the plain probe then its context probe, fitted on that task alone."""
    from halluprobe.localisation._localisation import TaskTokenProbes, fit_token_probe

    probes = {}
    for task in tasks:
        tr = [e for t, e in split["train"] if t == task]
        va = [e for t, e in split["validation"] if t == task]
        plain = fit_token_probe(
            tr, va, cs=TASK_CS, windows=PLAIN["windows"], smooths=PLAIN["smooths"], gaps=PLAIN["gaps"],
            view=view,
        )  # fmt: skip
        probes[task] = _context_probe(plain, tr, va, context_tokens, cs=TASK_CS)
    return TaskTokenProbes(probes)


def _span_f1(probe, examples: Sequence[Any]) -> float:
    """Micro character span F1 of a fitted token probe on ``examples`` (its threshold and gap)."""
    from halluprobe.localisation._localisation import span_counts, span_prf

    scores = [probe.decision_function(e.features) for e in examples]
    return float(span_prf(span_counts(examples, scores, probe.threshold, probe.gap).sum(0))[2])
