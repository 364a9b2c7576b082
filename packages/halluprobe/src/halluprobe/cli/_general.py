"""``halluprobe train --general``: one detector from several sources (`halluprobe.training._general`).

`halluprobe.cli` adds the flags (`add_general_args`) and calls `cmd_train_general` when ``--general``
is given.
"""

from __future__ import annotations

import json
from pathlib import Path

from halubench_data import clikit

GENERAL_ONLY = ("cache", "jobs")
"""``train`` flags that apply with ``--general`` only."""
NOT_GENERAL = {
    "toha": "--toha",
    "token_probe": "--token-probe",
    "token_cv": "--token-cv",
    "no_published": "--no-published",
}
"""``train`` flags (argument name -> flag) that a general detector does not take."""


def add_general_args(p) -> None:
    """Adds ``--general`` and ``--cache`` to the ``train`` parser ``p``."""
    p.add_argument(
        "--general", action="store_true",
        help="train one general detector on every --dataset (repeat the flag): equal weight per source, "
        "the candidate (--feature-sets) chosen by leave-one-source-out AUROC, calibrated on the pooled "
        "validation splits; writes OUT/detector and OUT/general.json",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=int, default=None,
        help="--general: held-out sources fitted at once, each in its own process (default 1; the detector "
        "is the same)",
    )  # fmt: skip
    p.add_argument(
        "--cache", action="append", type=Path, default=None, metavar="DIR",
        help="--general: another feature-cache folder (repeatable; e.g. OUT/cache of an earlier `halluprobe "
        "extract`) whose records of the same proxy settings are reused, grounding features added",
    )  # fmt: skip


def check_general_flags(args) -> list[str]:
    """The dataset specs of a ``train`` call; refuses flags of the other mode. Runs before the proxy loads."""
    specs = list(args.dataset or ["default"])
    if not args.general:
        if len(specs) > 1:
            raise clikit.UsageError("several --dataset need --general (one detector from several sources)")
        if args.cache:
            raise clikit.UsageError("--cache applies to --general only")
        if args.jobs is not None:
            raise clikit.UsageError("--jobs applies to --general only")
        return specs
    if args.jobs is not None and args.jobs < 1:
        raise clikit.UsageError(f"--jobs must be >= 1, got {args.jobs}")
    for name, flag in NOT_GENERAL.items():
        if getattr(args, name):
            raise clikit.UsageError(f"{flag} does not apply with --general")
    if len(specs) < 2:
        raise clikit.UsageError("--general needs at least two --dataset sources (repeat the flag)")
    if len(set(specs)) != len(specs):
        raise clikit.UsageError(f"--dataset repeats a source: {specs}")
    for folder in args.cache or ():
        if not folder.is_dir():
            raise FileNotFoundError(f"--cache {folder}: no such folder")
    return specs


def _load_sources(specs: list[str], args) -> list:
    from halubench_data import load

    from halluprobe.cli._common import parse_limit

    datasets, names = [], set()
    for spec in specs:
        ds = load(spec, limit=parse_limit(args.limit, spec), arg="--dataset")
        clikit.check_labels(
            ds, "--dataset", spec, {"train": (0, 1), "validation": (0, 1)}, "halluprobe train --general"
        )
        if ds.name in names:
            raise clikit.UsageError(f"--dataset {spec}: another source is also named {ds.name!r}")
        names.add(ds.name)
        datasets.append(ds)
    return datasets


def cmd_train_general(args, specs: list[str], selections: dict) -> int:
    """``halluprobe train --general``: extract (or reuse) every source's records and fit `fit_general`."""
    from flashstats_hf import load_model

    from halluprobe.blocks._induction import induction_scores, rank_heads
    from halluprobe.cli._common import check_sizes, load_proxy, parse_layers
    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._distributed import World
    from halluprobe.features._extract import ProxyExtractor, extract_records
    from halluprobe.features._grounding import cached_records
    from halluprobe.training._general import GENERAL_FEATURE_SETS, SPLITS, fit_general

    device = clikit.resolve_device(args.device)
    clikit.deterministic_kernels(device, args.autotune)
    out = clikit.check_out_dir(args.out, overwrite=args.overwrite)
    parse_layers(args.layers)
    check_sizes(args)
    clikit.check_model_arg(args.proxy, "--proxy")
    if args.graphs and not device.startswith("cuda"):
        raise ValueError(f"--graphs replays CUDA graphs and needs a CUDA device, got --device {device}")
    datasets = _load_sources(specs, args)
    clikit.claim_out_dir(out, overwrite=args.overwrite)
    for ds in datasets:
        clikit.status(f"source {ds.name}: {len(ds.train)} train, {len(ds.validation)} validation")
    model, tok = load_proxy(load_model, args.proxy, device)
    layers = parse_layers(args.layers, int(model.config.num_hidden_layers))
    ext = ProxyExtractor(model, tok, layers, graph_buckets=(128, 64) if args.graphs else None)
    settings = {**ext.settings, "proxy": args.proxy or "default"}
    cache = FeatureCache(out / "cache", settings)
    sources = [FeatureCache(folder, settings) for folder in args.cache or ()]
    records: dict[str, dict[str, list]] = {}
    for ds in datasets:
        records[ds.name] = {}
        for split in SPLITS:
            examples = ds.split(split).examples
            found = cached_records(examples, [cache, *sources])  # no proxy run, no copy
            missing = [ex for ex in examples if ex.id not in found]
            found.update(zip([ex.id for ex in missing], extract_records(
                missing, ext, cache, batch_size=args.batch_size, token_budget=args.token_budget,
                length=ext.length, progress=clikit.show_progress(), desc=f"{ds.name} {split}", world=World(),
            ), strict=True))  # fmt: skip
            records[ds.name][split] = [found[ex.id] for ex in examples]
    n_layers = int(model.config.num_hidden_layers)
    order = rank_heads(induction_scores(model), layers if layers is not None else tuple(range(n_layers)))
    sets = args.feature_sets or list(GENERAL_FEATURE_SETS)
    from halluprobe.training._calibration import degenerate_fit_lines

    with degenerate_fit_lines("halluprobe train"):
        result = fit_general(
            datasets, records, head_order=order, proxy=args.proxy, layers=ext.layers,
            hidden_layers=ext.hidden_layers or (), feature_sets=sets, progress=clikit.status,
            jobs=args.jobs or 1, **selections,
        )  # fmt: skip
    det_dir = result.detector.save(out / "detector")
    doc = {
        "sources": {ds.name: spec for ds, spec in zip(datasets, specs, strict=True)},
        "limit": args.limit,
        "feature_set": result.feature_set,
        "candidate": result.candidate,
        "threshold": result.detector.probe_.threshold,
        "calibration": {"slope": result.calibration[0], "intercept": result.calibration[1]},
        "selection": result.detector.probe_.selection,
        "loso_auroc": result.loso_auroc,
        "mean_loso_auroc": result.mean_loso_auroc(),
    }
    from halubench_data.files import atomic_write_bytes

    report = out / "general.json"
    atomic_write_bytes(report, json.dumps(clikit.json_ready(doc), indent=1).encode())
    lines = [f"  {fs:14s} mean held-out AUROC {m:.4f}" for fs, m in result.mean_loso_auroc().items()]
    lines += [f"general detector {result.candidate} ({result.feature_set}): {det_dir}", f"report: {report}"]
    clikit.emit(
        "\n".join(lines),
        lambda: {"out": str(out), "report": str(report), "detectors": {result.feature_set: str(det_dir)},
                 "results": json.loads(report.read_text(encoding="utf-8"))},
    )  # fmt: skip
    return 0
