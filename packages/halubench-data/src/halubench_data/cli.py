"""``halubench-data``: build datasets from local files, print their counts, run text-only baselines.

The parser is built without importing scikit-learn or ``datasets``, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dataset import Dataset

SPEC_HELP = (
    "dataset spec: 'default', a JSONL file, or NAME:PATH for a builder run on local files "
    "(e.g. ragtruth:../shared/data/ragtruth, ragtruth-qa:..., faithbench:..., wice:...)"
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (no heavy imports)."""
    parser = argparse.ArgumentParser(
        prog="halubench-data",
        description="Leakage-filtered contextual-hallucination datasets (label 1 = hallucinated).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a dataset from local files and write it as JSONL")
    b.add_argument("spec", help=SPEC_HELP)
    b.add_argument("--out", type=Path, required=True, help="output JSONL file (written atomically)")
    b.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    b.add_argument("--seed", type=int, default=42, help="seed of filters and splits (default 42)")
    b.add_argument(
        "--task", action="append", help="RAGTruth task to keep (QA, Summary, Data2txt); repeatable"
    )
    b.add_argument(
        "--model", action="append", help="RAGTruth generator to keep, e.g. llama-2-70b-chat; repeatable"
    )
    b.add_argument("--no-filter", action="store_true", help="HaluBench: skip length balancing and linking")
    b.add_argument("--n-contexts", type=int, default=100, help="default: number of contexts (default 100)")
    s = sub.add_parser("stats", help="print counts per source, label and split of a JSONL dataset")
    s.add_argument("spec", help=SPEC_HELP)
    t = sub.add_parser(
        "baselines", help="answer-only baselines (length, TF-IDF) on a JSONL dataset's test split"
    )
    t.add_argument("spec", help=SPEC_HELP)
    t.add_argument(
        "--n-bootstrap", type=int, default=10_000, help="group-bootstrap resamples (default 10000)"
    )
    return parser


def _build(args: argparse.Namespace) -> Dataset:
    from .select import BuildOptions, load

    options = BuildOptions(
        seed=args.seed,
        tasks=tuple(args.task) if args.task else None,
        models=tuple(args.model) if args.model else None,
        apply_filters=not args.no_filter,
        n_contexts=args.n_contexts,
    )
    return load(args.spec, options=options)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 bad input or refused overwrite)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "build":
            from .io import write_jsonl

            if args.out.exists() and not args.overwrite:
                raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it")
            ds = _build(args)
            if ds.report is not None:
                print(ds.report.summary())
            print(ds.stats_table())
            write_jsonl(ds, args.out, overwrite=args.overwrite)
            print(f"wrote {len(ds)} examples to {args.out}")
        elif args.command == "stats":
            from .select import load

            print(load(args.spec).stats_table())
        else:
            from .baselines import text_only_baselines
            from .metrics import results_table
            from .select import load

            ds = load(args.spec)
            print(results_table(text_only_baselines(ds, n_bootstrap=args.n_bootstrap)))
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"halubench-data: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
