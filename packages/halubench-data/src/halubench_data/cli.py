"""``halubench-data``: build datasets from local files, print their counts, run text-only baselines.

The parser is built without importing scikit-learn or ``datasets``, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import clikit

if TYPE_CHECKING:
    from .dataset import Dataset

BUILDERS = (
    "ragtruth",
    "ragtruth-original",
    "halubench",
    "trivia-plus",
    "phantom",
    "faithbench",
    "wice",
    "lfqa",
    "claimverify",
    "expertqa",
    "default",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (no heavy imports)."""
    parser = clikit.make_parser(
        "halubench-data",
        "Leakage-filtered contextual-hallucination datasets (label 1 = hallucinated).",
        dist="halubench-data",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a dataset from local files and write it as JSONL")
    b.add_argument("name", choices=BUILDERS, help="which builder")
    b.add_argument("--source", type=Path, help="input file or folder (not needed for 'default')")
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
    s.add_argument("file", type=Path)
    t = sub.add_parser(
        "baselines", help="answer-only baselines (length, TF-IDF) on a JSONL dataset's test split"
    )
    t.add_argument("file", type=Path)
    t.add_argument(
        "--n-bootstrap", type=int, default=10_000, help="group-bootstrap resamples (default 10000)"
    )
    return parser


def _build(args: argparse.Namespace) -> Dataset:
    from . import builders
    from .default import build_default

    if args.name == "default":
        if args.n_contexts < 2 or args.n_contexts % 2:
            raise clikit.UsageError(f"--n-contexts must be an even number >= 2, got {args.n_contexts}")
        return build_default(seed=args.seed, n_contexts=args.n_contexts)
    if args.source is None:
        raise ValueError(f"builder {args.name!r} needs --source PATH")
    if not args.source.exists():
        raise FileNotFoundError(f"--source {args.source} does not exist")
    if args.name in ("ragtruth", "ragtruth-original"):
        fn = builders.build_ragtruth if args.name == "ragtruth" else builders.build_ragtruth_original
        return fn(args.source, tasks=args.task or builders.TASKS, models=args.model, seed=args.seed)
    if args.name == "halubench":
        return builders.build_halubench(args.source, apply_filters=not args.no_filter, seed=args.seed)
    if args.name == "trivia-plus":
        return builders.build_trivia_plus(args.source, seed=args.seed)
    if args.name == "phantom":
        return builders.build_phantom(args.source, seed=args.seed)
    if args.name == "faithbench":
        return builders.build_faithbench(args.source, seed=args.seed)
    return builders.build_claims(args.name, args.source, seed=args.seed)


def cmd_build(args: argparse.Namespace) -> int:
    """``halubench-data build``: the dataset to ``--out`` (atomically); refuses an empty result."""
    from .io import write_jsonl

    if args.out.exists() and not args.overwrite:
        raise clikit.UsageError(f"--out {args.out} exists; pass --overwrite to replace it")
    if args.out.is_dir():
        raise clikit.UsageError(f"--out {args.out} is a folder; expected a JSONL file path")
    ds = _build(args)
    if ds.report is not None:
        clikit.status(ds.report.summary())
    if len(ds) == 0:
        raise clikit.UsageError(
            f"--source {args.source}: the {args.name} builder kept no examples (nothing written); "
            "check that the file has the builder's format and that --task/--model name values it holds"
        )
    print(ds.stats_table())
    write_jsonl(ds, args.out, overwrite=args.overwrite)
    print(f"wrote {len(ds)} examples to {args.out}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """``halubench-data stats``: counts per source, label and split."""
    from .io import read_jsonl

    print(read_jsonl(args.file).stats_table())
    return 0


def cmd_baselines(args: argparse.Namespace) -> int:
    """``halubench-data baselines``: answer-only baselines on the test split."""
    from .baselines import text_only_baselines
    from .io import read_jsonl
    from .metrics import results_table

    if args.n_bootstrap < 1:
        raise clikit.UsageError(f"--n-bootstrap must be a positive integer, got {args.n_bootstrap}")
    ds = read_jsonl(args.file)
    print(results_table(text_only_baselines(ds, n_bootstrap=args.n_bootstrap)))
    return 0


COMMANDS = {"build": cmd_build, "stats": cmd_stats, "baselines": cmd_baselines}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status follows `halubench_data.clikit` (0 ok, 1 failure, 2 bad input)."""
    return clikit.run(build_parser(), COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
