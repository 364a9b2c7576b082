"""``halluprobe finetune``: its parser and command (split from `halluprobe.cli`, which wires them in)."""

from __future__ import annotations

from pathlib import Path

from halubench_data import clikit

FINETUNE = {
    "out": "the reader's folder (load it with `halluprobe predict OUT` or `halluprobe.load(OUT)`)",
    "sources": "per source: answers in the training and validation splits",
    "validation": "metrics on the validation answers (which chose pooling, anchor, calibration, threshold)",
    "test": "metrics on the test answers, when the datasets have a test split: auroc, auroc_ci, f1, "
    "precision, recall, false_alarm_rate, threshold; with annotated spans also token_auroc, "
    "span_precision, span_recall, span_f1, span_f1_ci",
    "training": "steps, best_step, tokens, seconds, tokens_per_second and the validation history",
}


def add_finetune_parser(sub) -> None:
    """Adds the ``finetune`` sub-command to the ``halluprobe`` parser's sub-parsers ``sub``."""
    from halluprobe.reader._settings import POOLS, ReaderSettings
    from halluprobe.training._thresholds import THRESHOLD_RULES

    d = ReaderSettings()
    p = sub.add_parser(
        "finetune", help="fine-tune the proxy as a reader (low-rank adapters and a token head); save it",
        description="Fine-tune low-rank adapters and a token head on the proxy: token-level where the data "
        "marks hallucinated spans, example-level through the pooled token score elsewhere, every source "
        "weighted the same. Early stopping, pooling, calibration, threshold and span decoding are chosen on "
        "the validation splits; the test splits, when present, are scored. --out becomes a detector folder.",
    )  # fmt: skip
    clikit.add_dataset_arg(p, several="to train on several sources")
    clikit.add_limit_arg(p)
    p.add_argument(
        "--proxy", default=None, help="proxy model: hub id, folder or .gguf (default: SmolLM2-135M)"
    )
    clikit.add_out_arg(p, "the reader (detector.json, detector.safetensors) and finetune.json")
    clikit.add_device_arg(p)
    p.add_argument("--rank", type=int, default=d.rank, help=f"adapter rank (default {d.rank})")
    p.add_argument("--alpha", type=int, default=d.alpha, help=f"adapter alpha (default {d.alpha})")
    p.add_argument("--learning-rate", type=float, default=d.learning_rate, help=f"default {d.learning_rate}")
    p.add_argument(
        "--epochs", type=float, default=d.epochs, help=f"most passes over the data (default {d.epochs})"
    )
    p.add_argument(
        "--max-batch-tokens", type=int, default=d.max_batch_tokens,
        help=f"most padded tokens per training batch (default {d.max_batch_tokens})",
    )  # fmt: skip
    p.add_argument(
        "--pool", default=d.pool, choices=POOLS, help=f"pooling of the example loss (default {d.pool})"
    )
    p.add_argument(
        "--anchor", action="store_true",
        help="mix in the zero-fit overlap score, its weight chosen on the validation splits",
    )  # fmt: skip
    p.add_argument(
        "--threshold-rule", default="false-alarm@0.2", metavar="RULE",
        help=f"how the threshold is chosen on validation: {', '.join(THRESHOLD_RULES)} (default "
        "false-alarm@0.2: the lowest threshold that flags at most 20%% of the supported answers, mean over "
        "sources)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    p.add_argument(
        "--n-bootstrap", type=int, default=1000, help="resamples of the test intervals (default 1000)"
    )
    clikit.add_json_arg(p, FINETUNE)


def finetune_options(args):
    """The `halluprobe.pipeline.TrainOptions` of a ``halluprobe finetune`` call (flags read once, here)."""
    from halluprobe.pipeline._options import FinetuneOptions, TrainOptions

    finetune = FinetuneOptions(
        rank=args.rank, alpha=args.alpha, learning_rate=args.learning_rate, epochs=args.epochs,
        max_batch_tokens=args.max_batch_tokens, pool=args.pool, seed=args.seed, anchor=args.anchor,
        threshold_rule=args.threshold_rule, n_bootstrap=args.n_bootstrap,
    )  # fmt: skip
    return TrainOptions(
        kind="finetune", datasets=tuple(args.dataset or ["default"]), out=Path(args.out), feature_sets=None,
        limit=args.limit, proxy=args.proxy, device=args.device, overwrite=bool(args.overwrite),
        published=False, finetune=finetune,
    )  # fmt: skip


def cmd_finetune(args) -> int:
    """``halluprobe finetune``: its flags as `TrainOptions`, run by `halluprobe.pipeline.run`."""
    from halluprobe.pipeline._run import run

    report = run(finetune_options(args))
    assert report is not None  # one process
    clikit.emit(report.text, report.doc)
    return 0
