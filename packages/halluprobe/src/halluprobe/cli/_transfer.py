"""``halluprobe transfer``: its parser and command (split from `halluprobe.cli`, which wires them in)."""

from __future__ import annotations

from pathlib import Path

from halubench_data import clikit

TRANSFER = {
    "out": "the output folder",
    "files": "the files written: transfer.md, transfer.csv, reliability.png, reliability.json",
    "sources": "the held-out sources, in order",
    "summary": "per method: {method, kind, sources, mean_auroc, mean_delta_floor, beats_floor, mean_f1, "
    "mean_best_f1, f1_transfers, pooled_ece, mean_batch_f1, batch_f1_transfers}",
    "rows": "per held-out source and method: {source, method, kind, auroc, auroc_ci, f1, best_f1, threshold, "
    "ece, flagged, n, n_positive, delta_floor, batch_f1, batch_threshold}",
}
DEFAULT_TRANSFER_SETS = "A7,A64,H64,L9,A64H64"
"""Feature sets that ``halluprobe transfer`` fits when ``--feature-sets`` is not given."""


def add_transfer_parser(sub) -> None:
    """Adds the ``transfer`` sub-command to the ``halluprobe`` parser's sub-parsers ``sub``."""
    p = sub.add_parser(
        "transfer", help="leave-one-source-out: fit on every source but one, score the one left out",
        description="Hold each source of the datasets out in turn: fit the probes, the published detectors "
        "and the grounding floors on the other sources' training splits (sources weighted equally), "
        "calibrate and threshold on their validation splits, and score the held-out source.",
    )  # fmt: skip
    p.add_argument(
        "--dataset", action="append", required=True, metavar="SPEC",
        help="a dataset spec as in every CLI (repeat: at least two sources in all; a dataset of several "
        "sources, such as ragtruth:PATH, counts as each of them)",
    )  # fmt: skip
    p.add_argument(
        "--feature-sets", default=DEFAULT_TRANSFER_SETS,
        help="comma-separated feature sets, anchored candidates of the general detector (O+SET@w: the "
        "overlap score mixed with a probe of SET at weight w; O+SET: w chosen on validation; the packaged "
        "detector is O+C@0.5), or 'none' for the floors alone (no proxy; default "
        f"{DEFAULT_TRANSFER_SETS})",
    )  # fmt: skip
    p.add_argument("--no-published", action="store_true", help="skip the published detectors")
    p.add_argument(
        "--judge", action="store_true",
        help="add the proxy as an LLM judge (the template of each fold chosen on the other sources' "
        "validation splits; needs halujudge)",
    )  # fmt: skip
    p.add_argument(
        "--judge-template", action="append", default=None, metavar="NAME",
        help="a judge template to score (repeat; default: every template halujudge ships)",
    )  # fmt: skip
    p.add_argument(
        "--reader", action="store_true",
        help="add the fine-tuned reader (rows reader and O+reader): one fine-tuning of the proxy per "
        "held-out source on the others' training splits, early-stopped on their validation splits; its "
        "scores are kept in OUT/reader_scores.json (a GPU is advised: one fine-tuning per source)",
    )  # fmt: skip
    p.add_argument(
        "--reader-scores", type=Path, default=None, metavar="JSON",
        help="the reader rows from the reader_scores.json of an earlier run on the same datasets (no "
        "fine-tuning)",
    )  # fmt: skip
    p.add_argument("--calibration", default="platt", choices=("platt", "isotonic"), help="default platt")
    p.add_argument(
        "--threshold", default="mean-f1", metavar="RULE",
        help="the transferred threshold: mean-f1 (best mean F1 over the validation sources; default), "
        "calibrated-0.5, or false-alarm@R (the lowest threshold that flags at most the share R of the "
        "validation sources' supported answers, mean over sources)",
    )  # fmt: skip
    p.add_argument(
        "--held-out", default="all", choices=("all", "test"),
        help="score all examples of the held-out source (default) or its test split",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=int, default=1,
        help="held-out sources fitted at once, each in its own process (default 1; the table is the same)",
    )  # fmt: skip
    clikit.add_limit_arg(p)
    p.add_argument(
        "--proxy", default=None, help="proxy model: hub id, folder or .gguf (default: SmolLM2-135M)"
    )
    p.add_argument("--layers", default=None, help="scored layers, e.g. '0-11' (default: all)")
    clikit.add_batch_size_arg(p, "most examples per proxy forward")
    p.add_argument("--token-budget", type=int, default=16384, help="most tokens per proxy forward")
    p.add_argument(
        "--n-bootstrap", type=int, default=1000, help="resamples per AUROC interval (default 1000)"
    )
    clikit.add_out_arg(
        p, "transfer.md, transfer.csv, reliability.png and .json (the feature cache in OUT/cache)",
        default="runs/transfer",
    )  # fmt: skip
    clikit.add_device_arg(p)
    clikit.add_autotune_arg(p)
    clikit.add_json_arg(p, TRANSFER)


def transfer_options(args):
    """The `halluprobe.pipeline.TrainOptions` of a ``halluprobe transfer`` call (flags read once, here)."""
    from halluprobe.pipeline._options import TrainOptions, TransferOptions

    text = args.feature_sets.strip()
    sets = () if text == "none" else tuple(s.strip() for s in text.split(",") if s.strip())
    transfer = TransferOptions(
        judge=args.judge, judge_templates=tuple(args.judge_template or ()), calibration=args.calibration,
        threshold=args.threshold, held_out=args.held_out, n_bootstrap=args.n_bootstrap,
        reader=args.reader, reader_scores=args.reader_scores,
    )  # fmt: skip
    return TrainOptions(
        kind="transfer", datasets=tuple(args.dataset), out=Path(args.out), feature_sets=sets,
        limit=args.limit,
        proxy=args.proxy, layers=args.layers, device=args.device, batch_size=args.batch_size,
        token_budget=args.token_budget, autotune=args.autotune, overwrite=bool(args.overwrite),
        published=not args.no_published, jobs=args.jobs, transfer=transfer,
    )  # fmt: skip


def cmd_transfer(args) -> int:
    """``halluprobe transfer``: its flags as `TrainOptions`, run by `halluprobe.pipeline.run`."""
    from halluprobe.pipeline._run import run

    report = run(transfer_options(args))
    assert report is not None  # one process
    clikit.emit(report.text, report.doc)
    return 0
