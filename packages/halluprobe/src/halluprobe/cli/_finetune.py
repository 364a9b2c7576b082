"""``halluprobe finetune``: its parser and command (split from `halluprobe.cli`, which wires them in)."""

from __future__ import annotations

import json
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
REPORT = "finetune.json"
"""The run's report inside ``--out`` (beside the reader's ``detector.json``)."""


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
    clikit.add_out_arg(p, f"the reader (detector.json, detector.safetensors) and {REPORT}")
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


def _check(args):
    """Flags, paths and datasets, before torch is imported; returns the datasets and the settings."""
    from halubench_data import load

    from halluprobe.reader._settings import ReaderSettings
    from halluprobe.training._thresholds import check_threshold_rule

    clikit.check_device_name(args.device)
    clikit.check_out_dir(args.out, overwrite=args.overwrite)
    clikit.check_model_arg(args.proxy, "--proxy")
    settings = ReaderSettings(
        rank=args.rank, alpha=args.alpha, learning_rate=args.learning_rate, epochs=args.epochs,
        max_batch_tokens=args.max_batch_tokens, pool=args.pool, seed=args.seed,
    )  # fmt: skip
    try:
        settings.check()
        settings.adapter.check()
        check_threshold_rule(args.threshold_rule)
    except ValueError as exc:
        raise clikit.UsageError(str(exc)) from None
    if args.n_bootstrap < 1:
        raise clikit.UsageError(f"--n-bootstrap must be >= 1, got {args.n_bootstrap}")
    datasets = []
    for spec in args.dataset or ["default"]:
        ds = load(spec, limit=clikit.parse_limit(args.limit, dataset=spec), arg="--dataset")
        datasets.append(ds)
    examples = [e for ds in datasets for e in ds]
    for split in ("train", "validation"):
        labels = {e.label for e in examples if e.split == split}
        if labels != {0, 1}:
            raise clikit.UsageError(
                f"--dataset: the {split} splits need both labels (supported and hallucinated answers), "
                f"got {sorted(labels) or 'no answers'}"
            )
    return examples, settings


def cmd_finetune(args) -> int:
    """``halluprobe finetune``: fine-tune a reader, save it in ``--out``, report its metrics."""
    import numpy as np

    examples, settings = _check(args)
    device = clikit.resolve_device(args.device)
    clikit.deterministic_kernels(device, False)
    clikit.quiet_transformers()
    clikit.claim_out_dir(args.out, overwrite=args.overwrite)
    from halluprobe.reader import Reader
    from halluprobe.reader._data import as_examples
    from halluprobe.reader._evaluate import evaluate_reader

    fit_rows = [e for e in examples if e.split in ("train", "validation")]
    tests = [e for e in examples if e.split == "test"]
    test_rows = as_examples(tests, None, None) if tests else []
    reader = Reader(
        args.proxy, rank=settings.rank, alpha=settings.alpha, learning_rate=settings.learning_rate,
        epochs=settings.epochs, max_batch_tokens=settings.max_batch_tokens, pool=settings.pool,
        seed=settings.seed, anchor=args.anchor, threshold_rule=args.threshold_rule, device=device,
        progress=clikit.show_progress(),
    )  # fmt: skip
    clikit.status(f"fine-tuning on {len(fit_rows)} answers of {len({e.source for e in fit_rows})} source(s)")
    reader.fit(fit_rows, validation=np.array([e.split == "validation" for e in fit_rows]))
    out = Path(args.out)
    reader.save(out)
    test = (
        evaluate_reader(reader, test_rows, n_bootstrap=args.n_bootstrap, seed=settings.seed)
        if test_rows
        else None
    )
    doc = {
        "out": str(out), "sources": reader.card_["sources"], "validation": reader.validation_, "test": test,
        "training": reader.card_["training"],
    }  # fmt: skip
    from halubench_data.files import atomic_write_text

    atomic_write_text(out / REPORT, json.dumps(clikit.json_ready(doc), indent=1), overwrite=True)
    clikit.emit(lambda: _summary(reader, test, out), doc)
    return 0


def _summary(reader, test, out: Path) -> str:
    v, t = reader.validation_, reader.card_["training"]
    lines = [
        f"reader: {reader.probe_.feature_set}, threshold {reader.scoring_.threshold:.3f} "
        f"({reader.scoring_.threshold_rule})",
        f"training: {t['steps']} steps (best {t['best_step']}), {t['tokens_per_second']:.0f} tokens/s",
        f"validation: AUROC {v['auroc']:.3f}, false alarms {v['false_alarm_rate']:.2f}, "
        f"recall {v['recall']:.2f}",
    ]
    if test:
        lines.append(
            f"test: AUROC {test['auroc']:.3f} [{test['auroc_ci'][0]:.3f}, {test['auroc_ci'][1]:.3f}], F1 "
            f"{test['f1']:.3f}, false alarms {test['false_alarm_rate']:.2f}, recall {test['recall']:.2f}"
            + (f", span F1 {test['span_f1']:.3f}" if "span_f1" in test else "")
        )
    lines.append(f"written: {out} (halluprobe predict {out} --context ... --answer ...)")
    return "\n".join(lines)
