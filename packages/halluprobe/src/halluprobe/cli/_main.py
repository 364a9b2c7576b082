"""``halluprobe``: extract features, train and evaluate detectors, score one answer.

The parser is built by `build_parser` (`halluprobe.cli._parser`) without importing torch, Transformers
or scikit-learn, so ``halluprobe --help`` is fast; every command imports what it needs inside its function.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from halubench_data import clikit

from halluprobe.cli._common import check_sizes, load_proxy, parse_layers, parse_limit
from halluprobe.cli._general import check_general_flags
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


def _token_examples(ds, ext, args) -> dict:
    """Per-token inputs of every split for ``--token-probe`` (one more eager forward per batch)."""
    from halluprobe.features._token_examples import token_examples

    out = {}
    for split in ("train", "validation", "test"):
        clikit.status(f"per-token features: {split}")
        out[split] = token_examples(
            ds.split(split).examples, ext, batch_size=args.batch_size, view=args.token_view
        )
    return out


def cmd_train(args) -> int:
    """``halluprobe train``: the README's main job (see ``docs/guide/cli.md``)."""
    specs = check_general_flags(args)
    text = ",".join(DEFAULT_FEATURE_SETS) if args.feature_sets is None else args.feature_sets
    sets = [s.strip() for s in text.split(",") if s.strip()]
    if not sets:
        raise clikit.UsageError("--feature-sets is empty; name at least one, e.g. A7,A7H64, or ALL")
    if args.general:
        from halluprobe.cli._general import cmd_train_general
        from halluprobe.training._anchor import parse_candidate

        for name in sets:
            parse_candidate(name)  # a bad name fails before the proxy runs
        args.feature_sets = None if args.feature_sets is None else sets
        return cmd_train_general(args, specs, _selections(args))
    args.dataset = specs[0]
    if args.token_cv and not args.token_probe:
        raise clikit.UsageError("--token-cv applies to the token probe: add --token-probe")
    if args.token_cv == 1 or args.token_cv < 0:
        raise clikit.UsageError(f"--token-cv must be 0 (validation) or at least 2 folds, got {args.token_cv}")
    for block in ("a7", "l9"):  # a missing, special or huge selection file, before torch loads
        if (path := getattr(args, f"{block}_selection")) is not None:
            clikit.read_bounded(path, f"--{block}-selection", MAX_SELECTION_BYTES)
    from halluprobe.blocks._names import parse_feature_set

    for name in sets:
        parse_feature_set(name)  # a bad name fails before torch loads
    data = _check_run(args)
    from halluprobe.features._distributed import close_world
    from halluprobe.training._training import run_training

    selections = _selections(args)  # as does a malformed --a7-selection / --l9-selection
    ds, ext, cache = _setup(args, data)
    try:  # the extraction is the parallel part; rank 0 alone fits, evaluates and reports
        records = {s: _extract_split(ds, ext, cache, s, args) for s in ("train", "validation", "test")}
    finally:
        close_world(args.world)
    if not args.world.main:
        return 0
    from halluprobe.training._calibration import degenerate_fit_lines

    with degenerate_fit_lines("halluprobe train"):
        table = run_training(
            ds, records, ext, sets, Path(args.out), proxy=args.proxy, published=not args.no_published,
            toha=args.toha, token_examples=_token_examples(ds, ext, args) if args.token_probe else None,
            token_view=args.token_view, token_cv=args.token_cv, **selections,
        )  # fmt: skip
    out = Path(args.out)
    clikit.emit(
        f"{table}\nreport: {out / 'report.md'}",
        lambda: {
            "out": str(out), "report": str(out / "report.md"),
            "detectors": {name: str(out / "detectors" / name) for name in sets},
            "results": json.loads((out / "results.json").read_text(encoding="utf-8")),
        },
    )  # fmt: skip
    return 0


MAX_SELECTION_BYTES = 16 << 20
"""Largest ``--a7-selection`` / ``--l9-selection`` file read (a real one is a few kilobytes)."""


def _selections(args) -> dict:
    """``a7_features`` / ``l9_features`` from ``--a7-selection`` / ``--l9-selection`` files, when given."""
    from halluprobe.blocks._selection import Selection

    out = {}
    for block in ("A7", "L9"):
        path = getattr(args, f"{block.lower()}_selection", None)
        if path is not None:
            path = clikit.check_in_file(path, f"--{block.lower()}-selection")
            out[f"{block.lower()}_features"] = Selection.load(path, block).features
    return out


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
