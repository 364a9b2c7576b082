"""`TrainOptions`: every choice of one training run, and `check_options`, the one place they are checked.

``halluprobe train``, ``train --general`` and ``transfer`` turn their flags into a `TrainOptions` and
hand it to `halluprobe.pipeline.run`; nothing downstream re-reads a flag or checks it again. The
checks run before torch is imported, so a bad flag fails in a second. An option's error names the flag
it comes from (the options are the flags of those commands).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from halubench_data import clikit

from halluprobe.pipeline._judge import check_judge

KINDS: tuple[str, ...] = ("dataset", "general", "transfer", "finetune")
"""The kinds of run halluprobe ships (`halluprobe.pipeline.FIT_STAGES` holds one fit stage per kind, and
another kind plugs in there): probes of one dataset, a general detector from several sources, the
leave-one-source-out transfer table, a fine-tuned reader (`halluprobe.reader`)."""

MAX_SELECTION_BYTES = 16 << 20
"""Largest ``--a7-selection`` / ``--l9-selection`` file read (a real one is a few kilobytes)."""

MAX_LAYERS = 4096
"""Bound of ``--layers`` before the proxy's own layer count is known (more than any model has)."""


Calibration = Literal["platt", "isotonic"]
HeldOut = Literal["all", "test"]


@dataclass(frozen=True)
class TransferOptions:
    """The options that only ``halluprobe transfer`` takes."""

    judge: bool = False
    """Also score the proxy as an LLM judge (needs halujudge)."""
    judge_templates: tuple[str, ...] = ()
    """Judge templates to score (empty: every template halujudge ships)."""
    calibration: Calibration = "platt"
    """``"platt"`` or ``"isotonic"``."""
    threshold: str = "mean-f1"
    """``"mean-f1"`` (best mean F1 over the validation sources), ``"calibrated-0.5"`` or
    ``"false-alarm@R"`` (`halluprobe.training.transfer_threshold`)."""
    held_out: HeldOut = "all"
    """Score ``"all"`` of a held-out source, or its ``"test"`` split."""
    n_bootstrap: int = 1000
    """Resamples per AUROC interval."""
    reader: bool = False
    """Add the fine-tuned reader's rows, fine-tuned once per held-out source (`halluprobe.reader`)."""
    reader_scores: Path | None = None
    """Add the reader's rows from the fold scores of an earlier run (no fine-tuning)."""


@dataclass(frozen=True)
class FinetuneOptions:
    """The options that only ``halluprobe finetune`` takes (the fine-tuning's, `halluprobe.reader`)."""

    rank: int = 8
    """Adapter rank."""
    alpha: int = 16
    """Adapter alpha."""
    learning_rate: float = 4e-4
    """Learning rate of the adapters."""
    epochs: float = 2.0
    """Most passes over the training answers."""
    max_batch_tokens: int = 16384
    """Most padded tokens per training batch."""
    pool: str = "max"
    """Pooling of the example loss."""
    seed: int = 0
    """Seed of the fine-tuning."""
    anchor: bool = False
    """Mix in the zero-fit overlap score, its weight chosen on validation."""
    threshold_rule: str = "false-alarm@0.2"
    """How the threshold is chosen on validation (`halluprobe.training._thresholds.THRESHOLD_RULES`)."""
    n_bootstrap: int = 1000
    """Resamples of the test intervals."""

    def settings(self):
        """The `halluprobe.reader.ReaderSettings` of these options."""
        from halluprobe.reader._settings import ReaderSettings

        return ReaderSettings(
            rank=self.rank, alpha=self.alpha, learning_rate=self.learning_rate, epochs=self.epochs,
            max_batch_tokens=self.max_batch_tokens, pool=self.pool, seed=self.seed,
        )  # fmt: skip


@dataclass(frozen=True)
class TrainOptions:
    """One training run: its data, proxy, extraction, what it fits, and where it writes."""

    kind: str
    """One of `KINDS`."""
    datasets: tuple[str, ...]
    """Dataset specs (``--dataset``): one for ``"dataset"``, at least two sources for the others."""
    out: Path
    """Output folder (the feature cache goes to ``out/cache``)."""
    feature_sets: tuple[str, ...] | None
    """Feature sets to fit (``"dataset"``), candidates (``"general"``; None: `GENERAL_FEATURE_SETS`) or
    probes of ``"transfer"`` (empty: the floors and published detectors alone)."""
    limit: str | None = "auto"
    """Examples per split (``--limit``)."""
    proxy: str | None = None
    """Proxy model: hub id, folder or ``.gguf`` (None: the default SmolLM2)."""
    layers: str | None = None
    """Scored layers such as ``"0-11"`` (None: all)."""
    device: str = "auto"
    """Device of the proxy."""
    batch_size: int = 8
    """Most examples per proxy forward."""
    token_budget: int = 16384
    """Most tokens per proxy forward."""
    autotune: bool = False
    """Autotune the attention kernels on CUDA."""
    graphs: bool = False
    """Replay CUDA graphs in the extraction."""
    overwrite: bool = False
    """Replace the outputs of an earlier run in ``out``."""
    published: bool = True
    """Also fit the published detectors (not for ``"general"``)."""
    toha: bool = False
    """Also fit TOHA (``"dataset"`` only)."""
    token_probe: bool = False
    """Also fit a token probe on annotated spans (``"dataset"`` only)."""
    token_view: str = "mean+hidden"
    """The token probe's per-token features."""
    token_cv: int = 0
    """Folds of the token probe's group cross-validation (0: choose on validation)."""
    a7_selection: Path | None = None
    """A7's features from a selection file (None: the packaged selection)."""
    l9_selection: Path | None = None
    """L9's features from a selection file (None: the packaged selection)."""
    caches: tuple[Path, ...] = ()
    """Other feature-cache folders whose records are reused (``"general"`` only)."""
    jobs: int | None = None
    """Held-out sources fitted at once (``"general"``, ``"transfer"``; None: 1)."""
    threshold_rule: str | None = None
    """How a general detector's threshold is chosen (``"general"`` only; None:
    `halluprobe.training._general.GENERAL_THRESHOLD_RULE`)."""
    transfer: TransferOptions = field(default_factory=TransferOptions)
    """The options of ``"transfer"``."""
    finetune: FinetuneOptions = field(default_factory=FinetuneOptions)
    """The options of ``"finetune"``."""


@dataclass(frozen=True)
class Inputs:
    """What `check_options` read: the datasets and the A7/L9 feature selections."""

    datasets: list[Any]
    """``halubench_data.Dataset`` of every spec, in order."""
    selections: dict[str, Any]
    """``{"a7_features": ..., "l9_features": ...}`` (feature-name tuples) from the selection files given."""


def parse_layers(text: str | None, n_layers: int | None = None) -> tuple[int, ...] | None:
    """``'0-3,7'`` -> ``(0, 1, 2, 3, 7)``; ``None`` -> ``None`` (all layers).

    Every bound is checked before a range is built: against ``n_layers`` (the proxy's layer count)
    when given, else against `MAX_LAYERS`, so ``0-100000000`` fails at once.
    """
    if text is None:
        return None
    bounds: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            bounds.append((int(lo), int(hi if dash else lo)))
    except ValueError as exc:
        raise ValueError(f"--layers expects e.g. '0-11' or '3,5,7', got {text!r}") from exc
    limit = MAX_LAYERS if n_layers is None else n_layers
    for first, last in bounds:
        if not 0 <= first <= last:
            raise ValueError(f"--layers {text!r}: range {first}-{last} is empty or negative")
        if last >= limit:
            what = f"the proxy has {n_layers} layers (0-{n_layers - 1})" if n_layers else f"at most {limit}"
            raise ValueError(f"--layers {text!r}: layer {last} is out of range; {what}")
    return tuple(sorted({i for first, last in bounds for i in range(first, last + 1)}))


def _usage(condition: bool, message: str) -> None:
    if condition:
        raise clikit.UsageError(message)


def _check_mode(o: TrainOptions) -> None:
    """Options of one kind given to another, and the sizes."""
    general, dataset = o.kind == "general", o.kind == "dataset"
    _usage(
        dataset and len(o.datasets) > 1,
        "several --dataset need --general (one detector from several sources)",
    )
    _usage(dataset and bool(o.caches), "--cache applies to --general only")
    _usage(not general and o.threshold_rule is not None, "--threshold-rule applies to --general only")
    if o.threshold_rule is not None:
        from halluprobe.training._thresholds import check_threshold_rule

        try:
            check_threshold_rule(o.threshold_rule)
        except ValueError as exc:
            _usage(True, f"--threshold-rule: {exc}")
    for flag, given in (("--toha", o.toha), ("--token-probe", o.token_probe), ("--token-cv", o.token_cv),
                        ("--no-published", not o.published)):  # fmt: skip
        _usage(general and bool(given), f"{flag} does not apply with --general")
    _usage(
        general and len(o.datasets) < 2, "--general needs at least two --dataset sources (repeat the flag)"
    )
    _usage(dataset and o.jobs is not None, "--jobs applies to --general only")
    _usage(len(set(o.datasets)) != len(o.datasets), f"--dataset repeats a source: {list(o.datasets)}")
    for folder in o.caches:
        if not folder.is_dir():
            raise FileNotFoundError(f"--cache {folder}: no such folder")
    _usage(
        dataset and bool(o.token_cv) and not o.token_probe,
        "--token-cv applies to the token probe: add --token-probe",
    )
    _usage(
        o.token_cv == 1 or o.token_cv < 0,
        f"--token-cv must be 0 (validation) or at least 2 folds, got {o.token_cv}",
    )
    sizes = {
        "--batch-size": o.batch_size,
        "--token-budget": o.token_budget,
        "--jobs": 1 if o.jobs is None else o.jobs,
    }
    if o.kind == "transfer":
        sizes["--n-bootstrap"] = o.transfer.n_bootstrap
        for flag, kind in (("calibration", Calibration), ("held_out", HeldOut)):
            value, allowed = getattr(o.transfer, flag), get_args(kind)
            _usage(value not in allowed, f"--{flag.replace('_', '-')} {value!r}: expected one of {allowed}")
        _check_reader_flags(o.transfer)
    if o.kind == "finetune":
        sizes["--n-bootstrap"] = o.finetune.n_bootstrap
        _check_finetune(o.finetune)
    for flag, value in sizes.items():
        _usage(value < 1, f"{flag} must be >= 1, got {value}")


def _check_finetune(f: FinetuneOptions) -> None:
    """The fine-tuning's settings and threshold rule (their errors name the setting)."""
    from halluprobe.training._thresholds import check_threshold_rule

    try:
        f.settings().check()
        f.settings().adapter.check()
        check_threshold_rule(f.threshold_rule)
    except ValueError as exc:
        raise clikit.UsageError(str(exc)) from None


def _check_reader_flags(t: TransferOptions) -> None:
    """The threshold rule, and ``--reader`` / ``--reader-scores`` (one of them, a readable file)."""
    from halluprobe.training._thresholds import check_threshold_rule

    try:
        check_threshold_rule(t.threshold)
    except ValueError as exc:
        raise clikit.UsageError(f"--threshold: {exc}") from None
    _usage(
        t.reader and t.reader_scores is not None,
        "--reader fine-tunes; --reader-scores reuses scores: give one of them",
    )
    if t.reader_scores is not None:
        clikit.check_in_file(t.reader_scores, "--reader-scores")


def _check_feature_sets(o: TrainOptions) -> None:
    """Every feature set or candidate name parses (before the proxy runs; no torch for plain sets)."""
    from halluprobe.blocks._names import parse_feature_set

    sets = o.feature_sets or ()
    if o.kind == "transfer":  # plain sets, and anchored ones with a fixed weight (O+SET@w)
        from halluprobe.evaluation._transfer import anchored_fitter

        for name in sets:
            parse_feature_set(name) if not name.startswith("O+") else None
        anchored_fitter([n for n in sets if n.startswith("O+")], [])
        return
    if o.kind == "general":
        from halluprobe.training._anchor import parse_candidate

        for name in sets:
            parse_candidate(name)
        return
    for name in sets:
        parse_feature_set(name)


def _selection_files(o: TrainOptions) -> dict[str, Path]:
    """The selection files given, by block; a missing, special or huge one fails (before torch loads)."""
    out = {}
    for block, path in (("A7", o.a7_selection), ("L9", o.l9_selection)):
        if path is not None:
            flag = f"--{block.lower()}-selection"
            clikit.read_bounded(path, flag, MAX_SELECTION_BYTES)
            out[block] = clikit.check_in_file(path, flag)
    return out


def _read_selections(o: TrainOptions) -> dict[str, tuple[str, ...]]:
    """``a7_features`` / ``l9_features`` from the selection files given (checked)."""
    from halluprobe.blocks._selection import Selection

    return {
        f"{block.lower()}_features": Selection.load(path, block).features
        for block, path in _selection_files(o).items()
    }


def _load_datasets(o: TrainOptions) -> list[Any]:
    """The datasets of the run, with the labels each kind needs (one-line errors naming ``--dataset``)."""
    from halubench_data import load

    command = "halluprobe train --general" if o.kind == "general" else f"halluprobe {o.kind}"
    command = "halluprobe train" if o.kind == "dataset" else command
    needs = {"dataset": ("train", "validation", "test"), "transfer": ()}.get(o.kind, ("train", "validation"))
    datasets, names = [], set()
    for spec in o.datasets:
        limit = clikit.parse_limit(o.limit, dataset=spec if o.kind != "transfer" else "")
        ds = load(spec, limit=limit, arg="--dataset")
        if needs:
            clikit.check_labels(ds, "--dataset", spec, {s: (0, 1) for s in needs}, command)
        _usage(
            o.kind == "general" and ds.name in names,
            f"--dataset {spec}: another source is also named {ds.name!r}",
        )
        names.add(ds.name)
        datasets.append(ds)
    if o.kind == "transfer":
        from halluprobe.evaluation._folds import check_sources

        sources = list(dict.fromkeys(e.source for ds in datasets for e in ds))
        _usage(len(sources) < 2, f"--dataset: leave-one-source-out needs at least two sources, got {sources}")
        try:  # every fold fits (both labels on both sides), before any proxy work
            check_sources([e for ds in datasets for e in ds], o.transfer.held_out)
        except ValueError as exc:
            raise clikit.UsageError(str(exc)) from None
    if o.kind == "dataset":
        _check_token_data(o, datasets[0])
    return datasets


def _check_token_data(o: TrainOptions, ds: Any) -> None:
    spec = o.datasets[0]
    if o.token_cv:  # the folds deal whole groups: known before the proxy loads
        groups = {str(e.group) for s in ("train", "validation") for e in ds.split(s).examples}
        _usage(
            len(groups) < o.token_cv,
            f"--token-cv {o.token_cv}: the train and validation splits of --dataset {spec} hold "
            f"{len(groups)} groups, and the folds deal whole groups; at most {len(groups)} folds fit",
        )
    _usage(
        o.token_probe and not any(ex.spans for ex in ds.split("train")),
        f"--token-probe needs annotated spans in the training split of --dataset {spec}; it has none",
    )


def check_options(o: TrainOptions) -> Inputs:
    """Check every option and read the inputs, before torch loads; the one check of a run.

    Returns:
        The datasets and feature selections the run reads.

    Raises:
        halubench_data.clikit.UsageError: an option that does not fit (naming its flag).
        ValueError, FileNotFoundError: a bad value or a missing file or folder (naming its flag).
    """
    _check_mode(o)
    _usage(
        o.kind != "transfer" and o.feature_sets is not None and not o.feature_sets,
        "--feature-sets is empty; name at least one, e.g. A7,A7H64, or ALL",
    )
    _usage(o.kind == "dataset" and o.feature_sets is None, "a run of one dataset needs its feature sets")
    clikit.check_device_name(o.device)
    parse_layers(o.layers)  # the syntax, before the proxy loads
    if o.graphs and o.device in ("cpu", "mps"):
        raise ValueError(f"--graphs replays CUDA graphs and needs a CUDA device, got --device {o.device}")
    clikit.check_model_arg(o.proxy, "--proxy")
    clikit.check_out_dir(o.out, overwrite=o.overwrite)
    check_judge(o.transfer.judge, o.transfer.judge_templates)
    _selection_files(o)
    datasets = _load_datasets(o)
    _check_feature_sets(o)
    return Inputs(datasets, _read_selections(o))
