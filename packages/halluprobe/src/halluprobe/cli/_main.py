"""``halluprobe``: extract features, train and evaluate detectors, score one answer.

The parser is built by `build_parser` (`halluprobe.cli._parser`) without importing torch, Transformers
or scikit-learn, so ``halluprobe --help`` is fast; every command imports what it needs inside its function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from halubench_data import clikit

from halluprobe.cli._common import check_sizes, load_proxy, parse_layers, parse_limit
from halluprobe.cli._finetune import cmd_finetune
from halluprobe.cli._inputs import check_detector_arg
from halluprobe.cli._parser import (  # noqa: F401 (re-exported: the parser and its defaults)
    DEFAULT_FEATURE_SETS,
    DEFAULT_OUT,
    DEFAULT_TOKEN_BUDGET,
    DEFAULT_TRAIN_LIMIT,
    build_parser,
)
from halluprobe.cli._predict import cmd_predict
from halluprobe.cli._serve import cmd_serve
from halluprobe.cli._stream import cmd_stream
from halluprobe.cli._transfer import cmd_transfer


def _check_run(args):
    """Every flag, path and the dataset of a command that reads a dataset, before torch is imported.

    Returns the dataset. Errors name the flag (exit 2) and come in a second, not after the ML stack loads.
    """
    clikit.check_device_name(args.device)
    check_sizes(args)
    parse_layers(getattr(args, "layers", None))  # the syntax, before the proxy loads
    if getattr(args, "graphs", False) and args.device in ("cpu", "mps"):
        raise ValueError(f"--graphs replays CUDA graphs and needs a CUDA device, got --device {args.device}")
    clikit.check_out_dir(args.out, overwrite=args.overwrite)
    if getattr(args, "detector", None) is not None:
        check_detector_arg(args.detector)
    from halubench_data import load

    ds = load(args.dataset, limit=parse_limit(args.limit, args.dataset), arg="--dataset")
    labelled = {"train": ("train", "validation", "test")}.get(args.command, (getattr(args, "split", None),))
    needs = {s: (0, 1) for s in labelled if s}
    clikit.check_labels(ds, "--dataset", args.dataset, needs, f"halluprobe {args.command}")
    if getattr(args, "token_cv", 0):  # the folds deal whole groups: known before the proxy loads
        groups = {str(e.group) for s in ("train", "validation") for e in ds.split(s).examples}
        if len(groups) < args.token_cv:
            raise clikit.UsageError(
                f"--token-cv {args.token_cv}: the train and validation splits of --dataset {args.dataset} "
                f"hold {len(groups)} groups, and the folds deal whole groups; at most {len(groups)} folds fit"
            )
    if getattr(args, "token_probe", False) and not any(ex.spans for ex in ds.split("train")):
        raise clikit.UsageError(
            f"--token-probe needs annotated spans in the training split of --dataset {args.dataset}; "
            "it has none"
        )
    clikit.check_model_arg(getattr(args, "proxy", None), "--proxy")
    return ds


def _start(args, device_flag: str = "--device") -> str:
    """After the checks: the resolved device (imports torch), and the claim of --out (`clikit.claim_out_dir`).

    ``torchrun``: rank 0 alone claims the folder (it writes the outputs).
    """
    device = clikit.resolve_device(args.device, device_flag)
    clikit.deterministic_kernels(device, args.autotune)
    if getattr(args, "graphs", False) and not device.startswith("cuda"):
        raise ValueError(f"--graphs replays CUDA graphs and needs a CUDA device, got --device {device}")
    if args.overwrite is not None and os.environ.get("RANK", "0") == "0":  # one process of a torchrun
        clikit.claim_out_dir(args.out, overwrite=args.overwrite)
    return device


def _setup(args, ds):
    """Extractor, cache and distributed world of a run whose inputs `_check_run` accepted.

    ``torchrun`` starts one process per device.
    """
    if args.command.startswith("select-"):
        from halluprobe.blocks._blocks import A7_CANDIDATES, L9_CANDIDATES

        block = args.command.removeprefix("select-").upper()
        n = len(A7_CANDIDATES if block == "A7" else L9_CANDIDATES)
        if not 1 <= args.n_features <= n:
            raise clikit.UsageError(
                f"--n-features must be in 1..{n} (the {block} candidates), got {args.n_features}"
            )
    device = _start(args)
    from flashstats_hf import load_model

    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._distributed import init_world
    from halluprobe.features._extract import ProxyExtractor

    args.world = init_world(device)
    device = args.world.device(device)
    if args.world.main:
        clikit.status(
            f"dataset {ds.name}: {len(ds.train)} train, {len(ds.validation)} validation, {len(ds.test)} test"
        )
    model, tok = load_proxy(load_model, args.proxy, device)
    layers = parse_layers(args.layers, int(model.config.num_hidden_layers))
    ext = ProxyExtractor(
        model, tok, layers, toha=bool(getattr(args, "toha", False)),
        graph_buckets=(128, 64) if getattr(args, "graphs", False) else None,
    )  # fmt: skip
    settings = {**ext.settings, "proxy": args.proxy or "default"}
    cache = FeatureCache(Path(args.out) / "cache", settings)
    return ds, ext, cache


def _extract_split(ds, ext, cache, split: str, args):
    from halluprobe.features._extract import extract_records

    part = ds.split(split)
    return extract_records(
        part.examples,
        ext,
        cache,
        batch_size=args.batch_size,
        token_budget=args.token_budget,
        length=ext.length,
        progress=clikit.show_progress(),
        desc=split,
        world=args.world,
    )


def cmd_extract(args) -> int:
    """``halluprobe extract``."""
    data = _check_run(args)
    from halluprobe.features._distributed import close_world

    ds, ext, cache = _setup(args, data)
    splits = {}
    try:
        for split in ("train", "validation", "test"):
            splits[split] = len(_extract_split(ds, ext, cache, split, args))
    finally:
        close_world(args.world)
    if args.world.main:
        doc = {"cache": str(cache.root), "records": len(cache), "splits": splits}
        clikit.emit(f"{len(cache)} records in {cache.root}", doc)
    return 0


def train_options(args):
    """The `halluprobe.pipeline.TrainOptions` of a ``halluprobe train`` call (flags read once, here)."""
    from halluprobe.pipeline._options import TrainOptions

    sets = (
        None
        if args.feature_sets is None
        else tuple(s.strip() for s in args.feature_sets.split(",") if s.strip())
    )
    if sets is None and not args.general:
        sets = tuple(DEFAULT_FEATURE_SETS)
    return TrainOptions(
        kind="general" if args.general else "dataset", datasets=tuple(args.dataset or ["default"]),
        out=Path(args.out), feature_sets=sets, limit=args.limit, proxy=args.proxy, layers=args.layers,
        device=args.device, batch_size=args.batch_size, token_budget=args.token_budget,
        autotune=args.autotune, graphs=args.graphs, overwrite=bool(args.overwrite),
        published=not args.no_published, toha=args.toha, token_probe=args.token_probe,
        token_view=args.token_view, token_cv=args.token_cv, a7_selection=args.a7_selection,
        l9_selection=args.l9_selection, caches=tuple(args.cache or ()), jobs=args.jobs,
        threshold_rule=args.threshold_rule,
    )  # fmt: skip


def cmd_train(args) -> int:
    """``halluprobe train``: its flags as `TrainOptions`, run by `halluprobe.pipeline.run`."""
    from halluprobe.pipeline._run import run

    report = run(train_options(args))
    if report is not None:  # None on the other processes of a torchrun
        clikit.emit(report.text, report.doc)
    return 0


def cmd_select(args) -> int:
    """``halluprobe select-a7`` / ``select-l9``: the paper's one-off feature selection on a training split."""
    data = _check_run(args)
    import numpy as np

    from halluprobe.blocks._selection import run_selection

    block = args.command.removeprefix("select-").upper()
    ds, ext, cache = _setup(args, data)
    records = _extract_split(ds, ext, cache, args.split, args)
    part = ds.split(args.split)
    data = {
        "dataset": args.dataset,
        "dataset_name": ds.name,
        "split": args.split,
        "limit": args.limit,
        "proxy": args.proxy or "default (SmolLM2-135M-Instruct)",
        "device": clikit.resolve_device(args.device),
        "layers": args.layers or "all",
    }
    sel = run_selection(
        block, records, np.asarray(part.labels), list(part.groups), ext, args.n_features, data
    )
    path = sel.save(Path(args.out) / f"{block.lower()}.json")
    steps = list(sel.provenance.get("path", []))
    lines = [f"  + {st['feature']:28s} CV AUROC {st['cv_auroc']:.4f} (C={st['C']})" for st in steps]
    lines += [f"{block} features: {', '.join(sel.features)}", f"selection: {path}"]
    doc = {"block": block, "features": sel.features, "provenance": sel.provenance, "selection": str(path)}
    clikit.emit("\n".join(lines), doc)
    return 0


def cmd_evaluate(args) -> int:
    """``halluprobe evaluate``: F1/AUROC of a saved detector on one split."""
    ds = _check_run(args)
    import numpy as np
    from halubench_data.metrics import evaluate, results_table

    from halluprobe.detectors._detector import Detector
    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._extract import extract_records
    from halluprobe.features._grounding import cached_records

    device = _start(args)
    part = ds.split(args.split)
    clikit.quiet_transformers()
    det = Detector.load(args.detector)
    clikit.status(f"dataset {ds.name}: {len(part.examples)} {args.split} examples")  # inputs all good
    ext = det.extractor(device)
    proxy = det.proxy or "default"
    cache = FeatureCache(Path(args.out) / "cache", {**ext.settings, "proxy": proxy})
    # records of a full extraction (a train run's, in the same folder) serve the detector's reads too
    full = FeatureCache(Path(args.out) / "cache", {**ext.full_settings, "proxy": proxy})
    found = cached_records(part.examples, [full])
    missing = [ex for ex in part.examples if ex.id not in found]
    found.update(zip([ex.id for ex in missing], extract_records(
        missing, ext, cache, batch_size=args.batch_size, token_budget=args.token_budget, length=ext.length,
        progress=clikit.show_progress(),
    ), strict=True))  # fmt: skip
    recs = [found[ex.id] for ex in part.examples]
    scores = det.score_records(recs)
    res = evaluate(scores, np.asarray(part.labels), list(part.groups), det.probe_.threshold)
    from halubench_data.floors import best_floor, floor_results

    floors = floor_results(ds, args.split)
    best = best_floor({name: r.auroc for name, r in floors.items()})
    doc = {"dataset": ds.name, "split": args.split, "detector": str(args.detector),
           "methods": {det.probe_.feature_set: res}, "floors": floors,
           "best_floor": None if best is None else {"method": best[0], "auroc": best[1]}}  # fmt: skip
    rows = {f"{det.probe_.feature_set} ({args.split})": res, **floors}
    clikit.emit(lambda: results_table(rows, floor=None if best is None else best[1]), doc)
    return 0


COMMANDS = {
    "extract": cmd_extract,
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "predict": cmd_predict,
    "stream": cmd_stream,
    "transfer": cmd_transfer,
    "finetune": cmd_finetune,
    "serve": cmd_serve,
    "select-a7": cmd_select,
    "select-l9": cmd_select,
}


PARALLEL_COMMANDS = ("extract", "train")
"""Commands that run under ``torchrun`` (data-parallel extraction); the others refuse to."""


def _one_process(name: str, command):
    def run(args) -> int:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(
                f"`halluprobe {name}` runs in one process; under torchrun only "
                f"{' and '.join(PARALLEL_COMMANDS)} run"
            )
        return command(args)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``halluprobe`` command (exit status as in `halubench_data.clikit`)."""
    commands = {n: c if n in PARALLEL_COMMANDS else _one_process(n, c) for n, c in COMMANDS.items()}
    return clikit.run(build_parser(), commands, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
