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
        "detector is O+A7H64@0.4), or 'none' for the floors alone (no proxy; default "
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
    p.add_argument("--calibration", default="platt", choices=("platt", "isotonic"), help="default platt")
    p.add_argument(
        "--threshold", default="mean-f1", choices=("mean-f1", "calibrated-0.5"),
        help="the transferred threshold: best mean F1 over the validation sources (default), or 0.5",
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


def _check_templates(names: list[str]) -> None:
    """Halujudge is installed and ships every template named (before any model loads)."""
    try:
        from halujudge import list_templates
    except ImportError:
        raise clikit.UsageError("--judge needs halujudge: pip install 'halluprobe[judge]'") from None
    bad = [n for n in names if n not in list_templates()]
    if bad:
        raise clikit.UsageError(f"--judge-template {bad[0]!r}: expected one of {', '.join(list_templates())}")


def _judge_scores(model, tok, datasets, args) -> dict[str, dict[str, float]]:
    """``{template: {example id: score}}`` of the proxy as an LLM judge (``--judge-template``: default all).

    Scores are kept in OUT/cache.jsonl (halujudge's score cache, keyed by model, template, example and
    prompt), so a rerun, or one that was stopped, scores only what is missing.
    """
    from halujudge import LLMJudge, ScoreCache, list_templates

    examples = [e for ds in datasets for e in ds]
    cache = ScoreCache(Path(args.out) / "cache.jsonl")
    out = {}
    for name in args.judge_template or list_templates():
        judge = LLMJudge(model, tok, name, model_id=args.proxy or "default", batch_size=args.batch_size)
        clikit.status(f"judge template {name}: {len(examples)} examples")
        scores = judge.score(examples, cache=cache, progress=clikit.show_progress())
        out[name] = {e.id: float(v) for e, v in zip(examples, scores, strict=True)}
    return out


def _records(datasets, args) -> tuple[dict, list[int], list[str], dict[str, dict[str, float]] | None]:
    """Records of every example (via OUT/cache), head order, logit names, judge scores (``--judge``)."""
    from flashstats_hf import LOGIT_STAT_NAMES, load_model

    from halluprobe.blocks._induction import induction_scores, rank_heads
    from halluprobe.cli._common import load_proxy, parse_layers
    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._extract import ProxyExtractor, extract_records

    device = clikit.resolve_device(args.device)
    model, tok = load_proxy(load_model, args.proxy, device)
    layers = parse_layers(args.layers, int(model.config.num_hidden_layers))
    ext = ProxyExtractor(model, tok, layers)
    cache = FeatureCache(Path(args.out) / "cache", {**ext.settings, "proxy": args.proxy or "default"})
    records = {}
    for ds in datasets:
        recs = extract_records(
            ds.examples, ext, cache, batch_size=args.batch_size, token_budget=args.token_budget,
            length=ext.length, progress=clikit.show_progress(), desc=ds.name,
        )  # fmt: skip
        records.update({e.id: r for e, r in zip(ds.examples, recs, strict=True)})
    all_layers = layers if layers is not None else tuple(range(int(model.config.num_hidden_layers)))
    judge = _judge_scores(model, tok, datasets, args) if args.judge else None
    return records, rank_heads(induction_scores(model), all_layers), list(LOGIT_STAT_NAMES), judge


def cmd_transfer(args) -> int:
    """``halluprobe transfer``: the leave-one-source-out table, with floors and calibration."""
    from halubench_data import load

    from halluprobe.blocks._names import parse_feature_set
    from halluprobe.cli._common import parse_layers
    from halluprobe.evaluation._folds import check_sources

    if args.judge_template and not args.judge:
        raise clikit.UsageError("--judge-template needs --judge")
    if args.judge:
        _check_templates(args.judge_template or [])
    names = [] if args.feature_sets.strip() == "none" else [s.strip() for s in args.feature_sets.split(",")]
    anchored = [n for n in names if n.startswith("O+")]
    sets = [n for n in names if not n.startswith("O+")]
    for name in sets:
        parse_feature_set(name)  # a bad name fails before anything loads
    for flag in ("batch_size", "token_budget", "n_bootstrap", "jobs"):
        if getattr(args, flag) < 1:
            raise clikit.UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    clikit.check_device_name(args.device)
    clikit.check_out_dir(args.out, overwrite=args.overwrite)
    parse_layers(args.layers)
    limit = clikit.parse_limit(args.limit, dataset="")
    datasets = [load(spec, limit=limit, arg="--dataset") for spec in args.dataset]
    try:  # every fold fits (two sources, both labels in each pooled split) before any extraction
        sources = check_sources([e for ds in datasets for e in ds], args.held_out)
    except ValueError as exc:
        raise clikit.UsageError(f"--dataset: {exc}") from None
    from halluprobe.evaluation._transfer import (
        Fitter,
        anchored_fitter,
        floor_fitter,
        judge_fitter,
        leave_one_source_out,
        probe_fitter,
        published_fitter,
    )
    from halluprobe.training._calibration import degenerate_fit_lines

    anchored_fitter(anchored, [])  # a bad anchored candidate fails before anything is written
    clikit.claim_out_dir(args.out, overwrite=args.overwrite)
    clikit.status(f"sources: {', '.join(sources)}")
    fitters: list[Fitter] = [floor_fitter]
    records = None
    if names or not args.no_published or args.judge:
        clikit.deterministic_kernels(clikit.resolve_device(args.device), args.autotune)
        clikit.quiet_transformers()
        records, order, logit_names, judge = _records(datasets, args)
        fitters += [probe_fitter(sets, order)] if sets else []
        fitters += [anchored_fitter(anchored, order)] if anchored else []
        fitters += [] if args.no_published else [published_fitter(order, logit_names)]
        fitters += (
            [judge_fitter(judge, "SmolLM2 judge" if args.proxy is None else "proxy judge")] if judge else []
        )
    with degenerate_fit_lines("halluprobe transfer"):
        table = leave_one_source_out(
            datasets, records, fitters=fitters, calibration=args.calibration, threshold=args.threshold,
            held_out=args.held_out, n_bootstrap=args.n_bootstrap, progress=clikit.status,
            jobs=args.jobs,
        )  # fmt: skip
    paths = table.write(args.out)
    doc = {"out": args.out, "files": [str(p) for p in paths], "sources": table.sources,
           "summary": table.summary(), "rows": table.rows}  # fmt: skip
    clikit.emit(lambda: table.to_markdown() + f"\nwritten: {', '.join(str(p) for p in paths)}", doc)
    return 0
