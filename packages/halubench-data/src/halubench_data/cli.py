"""``halubench-data``: build datasets from local files, print their counts, run text-only baselines.

The parser is built without importing scikit-learn or ``datasets``, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import clikit
from .select import BUILT_FILE

if TYPE_CHECKING:
    from .dataset import Dataset
    from .select import BuildOptions

SPEC_HELP = (
    "dataset spec: 'default', a JSONL file, or NAME:PATH for a builder run on local files "
    "(e.g. ragtruth:../shared/data/ragtruth, ragtruth-qa:..., faithbench:..., wice:...)"
)


COUNTS = "[{source, label, split, n}]: examples per source, label (1 = hallucinated) and split"
JSON_BUILD = {
    "dataset": "the dataset's name",
    "out": "the JSONL file written (OUT/dataset.jsonl)",
    "n_examples": "examples written",
    "counts": COUNTS,
    "report": "what the builder read, kept and dropped: {source, n_read, n_kept, n_dropped, filtered, "
    "dropped_by_field}; null when the source has no load report",
}
JSON_STATS = {
    "dataset": "the dataset's name",
    "n_examples": "examples",
    "n_groups": "groups (contexts; the bootstrap units)",
    "counts": COUNTS,
}
JSON_BASELINES = {
    "dataset": "the dataset's name",
    "split": "the evaluated split: test",
    "methods": "{length, tfidf, overlap floor, grounding floor} -> {f1, auroc, precision, recall, threshold, "
    "n, n_positive, n_groups, f1_ci, auroc_ci, precision_ci, recall_ci, n_bootstrap, confidence} "
    "(halubench_data.EvalResult; NaN as null)",
    "best_floor": "{method, auroc} of the grounding floor with the higher test AUROC (the Δ floor column), "
    "or null",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (no heavy imports)."""
    parser = clikit.make_parser(
        "halubench-data",
        "Leakage-filtered contextual-hallucination datasets (label 1 = hallucinated).",
        dist="halubench-data",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a dataset from local files and write it as JSONL")
    _add_spec(b)
    clikit.add_out_arg(b, f"the dataset is written to OUT/{BUILT_FILE}, which --dataset OUT reads")
    b.add_argument("--seed", type=int, default=42, help="seed of filters and splits (default 42)")
    b.add_argument(
        "--task",
        action="append",
        help="RAGTruth task to keep (QA, Summary, Data2txt); repeatable; ragtruth-<task> takes only its own",
    )
    b.add_argument(
        "--generator", action="append", metavar="NAME",
        help="RAGTruth: keep the answers of this generator model, e.g. llama-2-70b-chat; repeatable",
    )  # fmt: skip
    b.add_argument("--model", action="append", dest="generator_deprecated", help=argparse.SUPPRESS)
    b.add_argument("--no-filter", action="store_true", help="HaluBench: skip length balancing and linking")
    b.add_argument(
        "--n-contexts",
        type=int,
        default=None,
        help="the 'default' builder only: number of synthetic contexts, even, >= 12 (default 100)",
    )
    clikit.add_json_arg(b, JSON_BUILD)
    s = sub.add_parser("stats", help="print counts per source, label and split of a dataset")
    _add_spec(s)
    clikit.add_json_arg(s, JSON_STATS)
    t = sub.add_parser(
        "baselines", help="text-only baselines (answer length, answer TF-IDF) and grounding floors (context "
        "overlap, grounding regression) on a dataset's test split",
    )  # fmt: skip
    _add_spec(t)
    t.add_argument(
        "--n-bootstrap", type=int, default=10_000, help="group-bootstrap resamples (default 10000)"
    )
    clikit.add_json_arg(t, JSON_BASELINES)
    return parser


def _add_spec(parser: argparse.ArgumentParser) -> None:
    """``--dataset SPEC`` (required), and the positional SPEC of earlier releases (deprecated)."""
    clikit.add_dataset_arg(parser, default=None, help=SPEC_HELP)
    parser.add_argument("spec", nargs="?", default=None, help=argparse.SUPPRESS)


def _spec(args: argparse.Namespace) -> str:
    """The dataset spec of ``--dataset`` (or of the deprecated positional form, with a warning)."""
    if args.spec is not None and args.dataset is not None:
        raise clikit.UsageError(f"give the dataset once: --dataset {args.dataset} (not also {args.spec!r})")
    if args.spec is not None:
        clikit.warn(f"a positional dataset spec is deprecated and will be removed; use --dataset {args.spec}")
        return str(args.spec)
    if args.dataset is None:
        raise clikit.UsageError("--dataset SPEC is required (e.g. --dataset default)")
    return str(args.dataset)


def _build(args: argparse.Namespace) -> Dataset:
    from .select import BuildOptions, parse_spec

    spec = args.dataset
    name = parse_spec(spec).name
    # a builder's own flag given to another builder would be ignored: refuse it instead
    if (args.task or args.generator) and not name.startswith("ragtruth"):
        raise clikit.UsageError(f"--task and --generator apply to the ragtruth builders, not to {spec}")
    if args.no_filter and name != "halubench":
        raise clikit.UsageError(f"--no-filter applies to the halubench builder, not to {spec}")
    if args.n_contexts is not None and name != "default":
        raise clikit.UsageError(f"--n-contexts applies to 'default', not to {spec}")
    n_contexts = 100 if args.n_contexts is None else args.n_contexts
    if name == "default":
        from .default import fewest_contexts

        least = fewest_contexts()
        if n_contexts < least or n_contexts % 2:
            raise clikit.UsageError(
                f"--n-contexts must be an even number >= {least} (the fewest that give the train, "
                f"validation and test splits one family of two contexts each), got {n_contexts}"
            )
    options = BuildOptions(
        seed=args.seed,
        tasks=tuple(args.task) if args.task else None,
        models=tuple(args.generator) if args.generator else None,
        apply_filters=not args.no_filter,
        n_contexts=n_contexts,
    )
    return _load(spec, options, building=True)


def _load(spec: str, options: BuildOptions | None = None, *, building: bool = False) -> Dataset:
    """The dataset of ``spec``; no examples is bad input (then, or when building, the load report on stderr).

    Without this check, a file of another format or an empty file would print a table of zeros and exit 0.
    """
    from .select import load, parse_spec

    ds = load(spec, options=options)
    if ds.report is not None and (building or len(ds) == 0):
        clikit.status(ds.report.summary())
    if len(ds) == 0:
        written = " (nothing written)" if building else ""
        if parse_spec(spec).name == "jsonl":
            raise clikit.UsageError(
                f"{spec} holds no examples{written}; expected JSON lines written by halubench-data build"
            )
        filters = " and that --task/--generator name values it holds" if building else ""
        raise clikit.UsageError(
            f"{spec}: the builder kept no examples{written}; check that the file has the builder's "
            f"format{filters}"
        )
    return ds


def cmd_build(args: argparse.Namespace) -> int:
    """``halubench-data build``: the dataset to ``OUT/dataset.jsonl`` (atomically); refuses an empty result.

    An ``--out`` ending in ``.jsonl`` is the file itself, as in earlier releases (deprecated).
    """
    from .io import write_jsonl

    args.dataset = _spec(args)
    if args.generator_deprecated:
        clikit.warn("--model of halubench-data build is deprecated and will be removed; use --generator")
        args.generator = [*(args.generator or []), *args.generator_deprecated]
    if str(args.out).endswith(".jsonl"):  # the file form of earlier releases
        clikit.warn(
            f"--out FILE.jsonl is deprecated: --out is a folder (the dataset goes to OUT/{BUILT_FILE})"
        )
        target = clikit.check_out_file(args.out)
        if target.exists() and not args.overwrite:
            raise clikit.UsageError(f"--out {target} exists; pass --overwrite to replace it")
    else:
        folder = clikit.check_out_dir(args.out, overwrite=args.overwrite)
        target = folder / BUILT_FILE
    ds = _build(args)  # a folder, or its folder, was checked before the (possibly long) build
    if target.name == BUILT_FILE:
        clikit.claim_out_dir(target.parent, overwrite=args.overwrite)
    write_jsonl(ds, target, overwrite=args.overwrite)
    rep = ds.report
    report = None
    if rep is not None:
        report = {"source": rep.source, "n_read": rep.n_read, "n_kept": rep.n_kept,
                  "n_dropped": rep.n_dropped, "filtered": dict(rep.filtered),
                  "dropped_by_field": rep.drop_counts()}  # fmt: skip
    doc = {"dataset": ds.name, "out": str(target), "n_examples": len(ds), "counts": _counts(ds)}
    clikit.emit(f"{ds.stats_table()}\nwrote {len(ds)} examples to {target}", {**doc, "report": report})
    return 0


def _counts(ds: Dataset) -> list[dict[str, object]]:
    return [
        {"source": source, "label": label, "split": split, "n": n}
        for (source, label, split), n in sorted(ds.counts().items())
    ]


def cmd_stats(args: argparse.Namespace) -> int:
    """``halubench-data stats``: counts per source, label and split."""
    ds = _load(_spec(args))
    doc = {"dataset": ds.name, "n_examples": len(ds), "n_groups": len(set(ds.groups)), "counts": _counts(ds)}
    clikit.emit(ds.stats_table, doc)
    return 0


def cmd_baselines(args: argparse.Namespace) -> int:
    """``halubench-data baselines``: text-only baselines and grounding floors on the test split."""
    from .baselines import text_only_baselines
    from .floors import best_floor, floor_results
    from .metrics import results_table

    if args.n_bootstrap < 1:
        raise clikit.UsageError(f"--n-bootstrap must be a positive integer, got {args.n_bootstrap}")
    ds = _load(_spec(args))
    results = {**text_only_baselines(ds, n_bootstrap=args.n_bootstrap),
               **floor_results(ds, "test", n_bootstrap=args.n_bootstrap)}  # fmt: skip
    best = best_floor({name: r.auroc for name, r in results.items()})
    doc = {"dataset": ds.name, "split": "test", "methods": results,
           "best_floor": None if best is None else {"method": best[0], "auroc": best[1]}}  # fmt: skip
    clikit.emit(lambda: results_table(results, floor=None if best is None else best[1]), doc)
    return 0


COMMANDS = {"build": cmd_build, "stats": cmd_stats, "baselines": cmd_baselines}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status follows `halubench_data.clikit` (0 ok, 1 failure, 2 bad input)."""
    return clikit.run(build_parser(), COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
