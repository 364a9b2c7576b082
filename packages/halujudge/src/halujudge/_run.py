"""The work behind ``halujudge evaluate``: load data and scorer, select, evaluate, write outputs."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from halubench_data import Dataset, atomic_write_text, clikit, load, results_table

from halujudge.cache import ScoreCache
from halujudge.evaluation import JudgeRun, TemplateSelection, run_evaluation, select_template

__all__ = ["evaluate_command"]


def _scorer(args: argparse.Namespace) -> tuple[Any, str]:
    flag, name = ("--judge", args.judge) if args.judge is not None else ("--model", args.model)
    with clikit.loading_model(flag, name):
        return _load_scorer(args)


def _load_scorer(args: argparse.Namespace) -> tuple[Any, str]:
    if args.checker == "minicheck":
        from halujudge.checkers import MiniCheck

        checker = MiniCheck.from_pretrained(
            args.model, device=args.device, batch_size=args.batch_size, claims=args.minicheck_claims
        )
        return checker, f"MiniCheck ({checker.model_id})"
    if args.checker == "hhem":
        from halujudge.checkers import HHEM

        return HHEM.from_pretrained(args.model, args.foundation, device=args.device), "HHEM-2.1-Open"
    from halujudge.judge import LLMJudge

    template = "strict" if args.template == "auto" else args.template
    judge = LLMJudge.from_pretrained(
        args.judge, template=template, device=args.device, batch_size=args.batch_size
    )
    return judge, judge.model_id


def _write_outputs(out: Path, run: JudgeRun, dataset: Dataset) -> None:
    labels = {e.id: e.label for e in dataset.examples}
    val_ids = [e.id for e in dataset.validation.examples]
    lines = [
        json.dumps({"id": i, "split": split, "label": labels[i], "score": float(s)})
        for split, ids, scores in (
            ("validation", val_ids, run.validation_scores),
            ("test", run.test_ids, run.test_scores),
        )
        for i, s in zip(ids, scores, strict=True)
    ]
    atomic_write_text(out / "scores.jsonl", "\n".join(lines) + "\n", overwrite=True)
    selection = {
        "method": run.method,
        "dataset": run.dataset,
        "threshold": run.threshold,
        "template_selection": asdict(run.selection) if run.selection else None,
        "test": asdict(run.result),
    }
    atomic_write_text(out / "selection.json", json.dumps(selection, indent=2) + "\n", overwrite=True)
    atomic_write_text(out / "results.md", results_table([(run.method, run.result)]) + "\n", overwrite=True)


def evaluate_command(args: argparse.Namespace) -> JudgeRun:
    """Run ``halujudge evaluate``, write its outputs to ``args.out`` and return the run."""
    dataset = load(args.dataset, limit=args.limit, arg="--dataset")
    pool: list[Dataset] = []
    auto = args.judge is not None and args.template == "auto"
    if auto:
        pool = [load(s, limit=args.limit, arg="--select-on") for s in args.select_on or []]
        for spec, data in zip(args.select_on or [], pool, strict=True):
            clikit.check_labels(data, "--select-on", spec, {"validation": (0, 1)}, "halujudge evaluate")
    # the threshold is chosen on validation, the test AUROC needs both labels; checked before the model
    # loads, so that a dataset that cannot be scored fails at once and leaves no output folder
    chooses = auto and not pool  # the evaluated dataset's validation split also chooses the template
    needs = {"validation": (0, 1) if chooses else (1,), "test": (0, 1)}
    clikit.check_labels(dataset, "--dataset", args.dataset, needs, "halujudge evaluate")
    scorer, method = _scorer(args)  # before anything is written: a model that fails to load leaves no folder
    args.out.mkdir(parents=True, exist_ok=True)
    cache = ScoreCache(args.out / "cache.jsonl")
    if cache.dropped_partial:
        clikit.status(f"halujudge: removed a partial last line from {cache.path} (an interrupted write)")
    selection: TemplateSelection | None = None
    progress = clikit.show_progress()
    if args.judge is not None:
        if auto:
            selection = select_template(scorer, pool or [dataset], cache=cache, progress=progress)
            scorer = scorer.with_template(selection.template)
        method = f"{method} / {scorer.template.name}"
    run = run_evaluation(scorer, dataset, method, cache, args.n_bootstrap, progress, selection)
    _write_outputs(args.out, run, dataset)
    return run
