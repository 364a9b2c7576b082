"""``halujudge`` command line. The parser is built without importing torch or Transformers."""

from __future__ import annotations

import argparse

from halubench_data import clikit

__all__ = ["build_parser", "main"]

TEMPLATES = ("plain", "claims", "strict", "strict_fewshot")
JSON_EVALUATE = {
    "dataset": "the evaluated dataset's name",
    "split": "the evaluated split: test (the threshold and template are chosen on validation)",
    "methods": "{method} -> {f1, auroc, precision, recall, threshold, n, n_positive, n_groups, f1_ci, "
    "auroc_ci, precision_ci, recall_ci, n_bootstrap, confidence} (halubench_data.EvalResult; NaN as null)",
    "template_selection": "LLM judge with --template auto: {template, mean_auroc, aurocs: template -> "
    "dataset -> validation AUROC}; else null",
    "out": "the folder with scores.jsonl, selection.json, results.md and cache.jsonl",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``halujudge`` (cheap: imports nothing heavy)."""
    parser = clikit.make_parser(
        "halujudge",
        "LLM-judge, MiniCheck and HHEM baselines for contextual hallucination detection.",
        dist="halujudge",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser(
        "evaluate",
        help="score a dataset's validation and test splits, pick template and threshold, report metrics",
        description="Template by mean validation AUROC, threshold by validation F1, test metrics with "
        "group-bootstrap intervals. Scores are cached in OUT/cache.jsonl, so a rerun resumes.",
    )
    who = ev.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--judge", metavar="MODEL", help="causal LM judge: hub id, local folder, .gguf, or 'smollm2'"
    )
    who.add_argument("--checker", choices=("minicheck", "hhem"), help="a grounding checker (needs --model)")
    ev.add_argument("--model", metavar="PATH", help="checker weights: hub id or downloaded snapshot folder")
    ev.add_argument("--foundation", metavar="PATH", help="HHEM only: the google/flan-t5-base snapshot folder")
    ev.add_argument(
        "--minicheck-claims",
        choices=("whole", "sentences"),
        default=None,
        help="MiniCheck only: score the whole answer as one claim (default; MiniCheck's own scorer and the "
        "paper) or take the minimum over answer sentences (stricter variant)",
    )
    clikit.add_dataset_arg(ev, default=None, required=True)
    clikit.add_out_arg(ev, "scores.jsonl, selection.json, results.md and the score cache cache.jsonl")
    ev.add_argument(
        "--template", default=None, choices=("auto", *TEMPLATES), help="judge template (default: auto)"
    )
    ev.add_argument(
        "--select-on",
        nargs="+",
        default=None,
        metavar="SPEC",
        help="dataset specs whose validation splits choose the template (default: the evaluated dataset)",
    )
    clikit.add_limit_arg(ev)
    clikit.add_batch_size_arg(ev)
    clikit.add_device_arg(ev)
    ev.add_argument(
        "--n-bootstrap", type=int, default=10_000, metavar="B",
        help="group-bootstrap resamples of the test intervals (default 10000)",
    )  # fmt: skip
    clikit.add_json_arg(ev, JSON_EVALUATE)
    return parser


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``halujudge evaluate``: check the arguments, run, print the results table on stdout."""
    for name in ("batch_size", "n_bootstrap"):
        value = getattr(args, name)
        if value < 1:
            raise clikit.UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    args.limit = clikit.parse_limit(args.limit, dataset=args.dataset)  # a split needs both labels
    # a flag of another scorer would be ignored: refuse it instead
    if args.judge is not None and args.model:
        raise clikit.UsageError("--model applies to --checker (a --judge names its model itself)")
    if args.foundation and args.checker != "hhem":
        raise clikit.UsageError("--foundation applies to --checker hhem only")
    if args.minicheck_claims is not None and args.checker != "minicheck":
        raise clikit.UsageError("--minicheck-claims applies to --checker minicheck only")
    if args.template is not None and args.judge is None:
        raise clikit.UsageError("--template applies to --judge only")
    if args.select_on and (args.judge is None or args.template not in (None, "auto")):
        raise clikit.UsageError(
            "--select-on applies to --judge with --template auto (it chooses the template)"
        )
    args.template = args.template or "auto"
    args.minicheck_claims = args.minicheck_claims or "whole"
    if args.checker and not args.model:
        raise clikit.UsageError(
            f"--checker {args.checker} needs --model PATH (the downloaded checkpoint folder)"
        )
    if args.checker == "hhem" and not args.foundation:
        raise clikit.UsageError(
            "--checker hhem needs --foundation PATH (a google/flan-t5-base snapshot folder)"
        )
    clikit.check_device_name(args.device)
    from halujudge.loading import SMOLLM2_ALIASES

    for flag in ("judge", "model", "foundation"):  # a hub id not cached: one line at once, no retries
        aliases = SMOLLM2_ALIASES if flag == "judge" else ()
        clikit.check_model_arg(getattr(args, flag), f"--{flag}", aliases)
    args.out = clikit.check_out_dir(args.out, overwrite=args.overwrite)
    args.device = clikit.resolve_device(args.device)
    clikit.claim_out_dir(args.out, overwrite=args.overwrite)
    from halubench_data import results_table

    from halujudge._run import evaluate_command

    run = evaluate_command(args)
    doc = {"dataset": run.dataset, "split": "test", "methods": {run.method: run.result},
           "template_selection": run.selection, "out": str(args.out)}  # fmt: skip
    clikit.emit(lambda: results_table([(run.method, run.result)]), doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``halujudge`` command (exit status as in `halubench_data.clikit`)."""
    return clikit.run(build_parser(), {"evaluate": cmd_evaluate}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
