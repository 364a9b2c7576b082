"""The work behind ``halujudge evaluate``: load data and scorer, select, evaluate, write outputs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from halubench_data import Dataset, atomic_write_text, clikit, read_jsonl, results_table

from halujudge.cache import ScoreCache
from halujudge.evaluation import JudgeRun, TemplateSelection, run_evaluation, select_template

__all__ = ["evaluate_command", "limit_per_split", "load_dataset"]


NAMED = ("default", "ragtruth", "ragtruth-qa", "halubench", "trivia-plus", "phantom", "faithbench", "wice",
         "lfqa", "claimverify", "expertqa")  # fmt: skip


def load_dataset(spec: str, source: str | Path | None = None) -> Dataset:
    """A dataset from a halubench-data JSONL file, or built by name with halubench-data's builders.

    Args:
        spec: a JSONL path, or one of `NAMED` (``default`` needs no source; ``ragtruth-qa`` is
            RAGTruth's QA task only).
        source: the builder's input file or folder (e.g. ``../shared/data/ragtruth``).

    Raises:
        FileNotFoundError: if ``spec`` is neither an existing file nor a known name, or ``source`` is missing.
    """
    path = Path(spec).expanduser()
    if path.is_file():
        return read_jsonl(path)
    if spec not in NAMED:
        raise FileNotFoundError(
            f"dataset {spec!r}: no such file and not a builder name; pass a JSONL written by halubench-data "
            f"or one of {list(NAMED)} (with --source PATH except for 'default')"
        )
    if spec == "default":
        from halubench_data.default import build_default

        return build_default()
    if source is None or not Path(source).exists():
        raise FileNotFoundError(
            f"dataset {spec!r} is built from local files: pass --source PATH (got {source})"
        )
    from halubench_data import builders

    if spec in ("ragtruth", "ragtruth-qa"):
        return builders.build_ragtruth(source, tasks=["QA"] if spec == "ragtruth-qa" else builders.TASKS)
    simple: dict[str, Callable[[str | Path], Dataset]] = {
        "halubench": builders.build_halubench, "trivia-plus": builders.build_trivia_plus,
        "phantom": builders.build_phantom, "faithbench": builders.build_faithbench,
    }  # fmt: skip
    if spec in simple:
        return simple[spec](source)
    return builders.build_claims(spec, source)


def limit_per_split(dataset: Dataset, limit: int | None) -> Dataset:
    """At most ``limit`` examples of each split, half of each label where possible, in dataset order."""
    if limit is None:
        return dataset
    kept: list[Any] = []
    for split in ("train", "validation", "test"):
        part = dataset.split(split).examples
        by_label = {lab: [e for e in part if e.label == lab] for lab in (1, 0)}
        take_pos = min(len(by_label[1]), max(limit - len(by_label[0]), (limit + 1) // 2))
        chosen = {e.id for e in by_label[1][:take_pos] + by_label[0][: limit - take_pos]}
        kept.extend(e for e in part if e.id in chosen)
    return Dataset(tuple(kept), dataset.name)


def _scorer(args: argparse.Namespace) -> tuple[Any, str]:
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


def evaluate_command(args: argparse.Namespace) -> str:
    """Run ``halujudge evaluate`` and return the Markdown table it printed to ``results.md``."""
    dataset = limit_per_split(load_dataset(args.dataset, args.source), args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    cache = ScoreCache(args.out / "cache.jsonl")
    if cache.dropped_partial:
        clikit.status(f"halujudge: removed a partial last line from {cache.path} (an interrupted write)")
    scorer, method = _scorer(args)
    selection: TemplateSelection | None = None
    progress = not args.no_progress and not clikit.is_quiet()
    if args.judge is not None:
        if args.template == "auto":
            pool = [limit_per_split(load_dataset(s), args.limit) for s in args.select_on or []] or [dataset]
            selection = select_template(scorer, pool, cache=cache, progress=progress)
            scorer = scorer.with_template(selection.template)
        method = f"{method} / {scorer.template.name}"
    run = run_evaluation(scorer, dataset, method, cache, args.n_bootstrap, progress, selection)
    _write_outputs(args.out, run, dataset)
    return results_table([(run.method, run.result)])
