"""The fit stage, one per kind of run (`FIT_STAGES`): the seam where a kind of estimator plugs in.

A fit stage takes the checked options, the inputs and the extraction (None when its `FitStage.reads`
says it reads no records) and returns a `Fitted`, which writes itself (`Fitted.save`) and reports
(`Fitted.report`). Blocks, fit, calibration and threshold happen inside it, in that order:

- ``"dataset"``: a probe per feature set on one dataset (`halluprobe.pipeline._report.fit_dataset`);
- ``"general"``: one probe chosen across sources (`halluprobe.training._general.fit_general_probe`);
- ``"transfer"``: every method fitted on all sources but one and scored on it
  (`halluprobe.evaluation.leave_one_source_out`);
- ``"finetune"``: a fine-tuned reader (`halluprobe.pipeline._finetune`): its `FitStage` reads no
  records (it reads the text itself), trains from ``inputs.datasets`` and saves the reader in the
  detector folder format. Another kind of detector plugs in the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from halubench_data import clikit

from halluprobe.pipeline._extraction import Extraction
from halluprobe.pipeline._options import Inputs, TrainOptions
from halluprobe.pipeline._stages import Report as Report


class Fitted(Protocol):
    """The fit stage's result: it saves itself, then reports."""

    def save(self, out: Path) -> dict[str, Path]:
        """Write the fitted detectors (or tables) under ``out``; returns what was written, by name."""
        ...

    def report(self, out: Path, saved: dict[str, Path]) -> Report:
        """Write the run's report under ``out`` and return its summary."""
        ...


@dataclass(frozen=True)
class FitStage:
    """One kind of run's fit stage."""

    fit: Callable[[TrainOptions, Inputs, Extraction | None], Fitted]
    """``(options, inputs, extraction) -> Fitted``."""
    reads: Callable[[TrainOptions], bool] = lambda o: True
    """Whether the fit reads proxy records (False: the extraction stage is skipped)."""


@dataclass
class _DatasetFitted:
    o: TrainOptions
    x: Extraction
    fit: Any  # halluprobe.pipeline._report.DatasetFit

    def save(self, out: Path) -> dict[str, Path]:
        from halluprobe.pipeline._report import save_dataset

        return save_dataset(self.fit, self.x.extractor, out, proxy=self.o.proxy)

    def report(self, out: Path, saved: dict[str, Path]) -> Report:
        from halluprobe.pipeline._report import report_dataset

        table = report_dataset(self.fit, self.x.extractor, out, published=self.o.published, toha=self.o.toha)
        return Report(
            f"{table}\nreport: {out / 'report.md'}",
            lambda: {"out": str(out), "report": str(out / "report.md"),
                     "detectors": {name: str(path) for name, path in saved.items()},
                     "results": json.loads((out / "results.json").read_text(encoding="utf-8"))},
        )  # fmt: skip


def fit_dataset_stage(o: TrainOptions, inputs: Inputs, x: Extraction | None) -> Fitted:
    """Probes of one dataset (``halluprobe train``)."""
    from halluprobe.pipeline._report import fit_dataset

    assert x is not None
    ds = inputs.datasets[0]
    records = {s: x.split(ds.split(s).examples) for s in ("train", "validation", "test")}
    tokens = None
    if o.token_probe:
        from halluprobe.features._token_examples import token_examples

        tokens = {}
        for split in ("train", "validation", "test"):
            clikit.status(f"per-token features: {split}")
            tokens[split] = token_examples(
                ds.split(split).examples, x.extractor, batch_size=o.batch_size, view=o.token_view
            )
    fit = fit_dataset(
        ds, records, x.extractor, list(o.feature_sets or ()), token_examples=tokens, token_view=o.token_view,
        token_cv=o.token_cv, **inputs.selections,
    )  # fmt: skip
    return _DatasetFitted(o, x, fit)


@dataclass
class _GeneralFitted:
    o: TrainOptions
    inputs: Inputs
    detector: Any  # halluprobe.Detector
    general: Any  # halluprobe.training._general.GeneralProbe

    def save(self, out: Path) -> dict[str, Path]:
        return {self.general.feature_set: self.detector.save(out / "detector")}

    def report(self, out: Path, saved: dict[str, Path]) -> Report:
        from halubench_data.files import atomic_write_bytes

        g = self.general
        doc = {
            "sources": dict(zip((ds.name for ds in self.inputs.datasets), self.o.datasets, strict=True)),
            "limit": self.o.limit, "feature_set": g.feature_set, "candidate": g.candidate,
            "threshold": g.probe.threshold,
            "calibration": {"slope": g.calibration[0], "intercept": g.calibration[1]},
            "selection": g.probe.selection, "loso_auroc": g.loso_auroc,
            "mean_loso_auroc": g.mean_loso_auroc(),
        }  # fmt: skip
        report = out / "general.json"
        atomic_write_bytes(report, json.dumps(clikit.json_ready(doc), indent=1).encode())
        lines = [f"  {fs:14s} mean held-out AUROC {m:.4f}" for fs, m in g.mean_loso_auroc().items()]
        folder = saved[g.feature_set]
        lines += [f"general detector {g.candidate} ({g.feature_set}): {folder}", f"report: {report}"]
        return Report(
            "\n".join(lines),
            lambda: {"out": str(out), "report": str(report), "detectors": {g.feature_set: str(folder)},
                     "results": json.loads(report.read_text(encoding="utf-8"))},
        )  # fmt: skip


def fit_general_stage(o: TrainOptions, inputs: Inputs, x: Extraction | None) -> Fitted:
    """One general detector from several sources (``halluprobe train --general``)."""
    from halluprobe.detectors._detector import Detector
    from halluprobe.training._general import (
        GENERAL_FEATURE_SETS,
        GENERAL_THRESHOLD_RULE,
        SPLITS,
        fit_general_probe,
    )

    assert x is not None
    records = {ds.name: {s: x.split(ds.split(s).examples) for s in SPLITS} for ds in inputs.datasets}
    g = fit_general_probe(
        inputs.datasets, records, head_order=x.head_order(),
        feature_sets=o.feature_sets or GENERAL_FEATURE_SETS,
        progress=clikit.status, jobs=o.jobs or 1,
        threshold_rule=o.threshold_rule or GENERAL_THRESHOLD_RULE, **inputs.selections,
    )  # fmt: skip
    ext = x.extractor
    det = Detector.from_probe(
        g.probe, proxy=o.proxy, layers=ext.layers, hidden_layers=ext.hidden_layers or ()
    )
    return _GeneralFitted(o, inputs, det, g)


@dataclass
class _TransferFitted:
    table: Any  # halluprobe.evaluation.TransferTable

    def save(self, out: Path) -> dict[str, Path]:
        return {p.name: p for p in self.table.write(out)}

    def report(self, out: Path, saved: dict[str, Path]) -> Report:
        paths = [str(p) for p in saved.values()]
        t = self.table
        doc = {"out": str(out), "files": paths, "sources": t.sources, "summary": t.summary(), "rows": t.rows}
        return Report(lambda: t.to_markdown() + f"\nwritten: {', '.join(paths)}", doc)


def _reader_fitters(o: TrainOptions, inputs: Inputs) -> list:
    """The reader's rows: fine-tuned here (``reader``) or read back (``reader_scores``); else none."""
    from halluprobe.reader._transfer import (
        fold_scores,
        missing_folds,
        read_fold_scores,
        reader_fitter,
        write_fold_scores,
    )

    t = o.transfer
    if t.reader_scores is not None:
        folds = read_fold_scores(t.reader_scores)
        sources = list(dict.fromkeys(e.source for ds in inputs.datasets for e in ds))
        missing = missing_folds(folds, sources)
        if missing:
            clikit.status(
                f"warning: {t.reader_scores} has no reader for held-out {', '.join(missing)}: the rows "
                f"reader and O+reader cover {len(sources) - len(missing)} of {len(sources)} sources"
            )
        return [reader_fitter(folds)]
    if not t.reader:
        return []
    from halluprobe.reader._settings import ReaderSettings

    settings = ReaderSettings()
    examples = [e for ds in inputs.datasets for e in ds]
    device = clikit.resolve_device(o.device)
    folds = fold_scores(
        examples, settings, proxy=o.proxy, device=device, held_out=t.held_out, progress=clikit.status
    )
    meta = {"settings": settings.as_dict(), "proxy": o.proxy, "held_out": t.held_out}
    write_fold_scores(Path(o.out) / "reader_scores.json", folds, meta)
    return [reader_fitter(folds)]


def fit_transfer_stage(o: TrainOptions, inputs: Inputs, x: Extraction | None) -> Fitted:
    """Leave-one-source-out: every method fitted on the other sources, scored on the one held out."""
    from flashstats_hf import LOGIT_STAT_NAMES

    from halluprobe.evaluation._transfer import (
        Fitter,
        anchored_fitter,
        floor_fitter,
        judge_fitter,
        leave_one_source_out,
        probe_fitter,
        published_fitter,
    )
    from halluprobe.pipeline._judge import judge_scores

    t = o.transfer
    anchored = [n for n in o.feature_sets or () if n.startswith("O+")]
    sets = [n for n in o.feature_sets or () if not n.startswith("O+")]
    fitters: list[Fitter] = [floor_fitter]
    if x is not None:
        order = x.head_order()
        fitters += [probe_fitter(sets, order)] if sets else []
        fitters += [anchored_fitter(anchored, order)] if anchored else []
        fitters += [published_fitter(order, list(LOGIT_STAT_NAMES))] if o.published else []
        if t.judge:
            name = "SmolLM2 judge" if o.proxy is None else "proxy judge"
            scores = judge_scores(
                x.model, x.tokenizer, inputs.datasets, out=o.out, templates=t.judge_templates,
                model_id=o.proxy or "default", batch_size=o.batch_size,
            )  # fmt: skip
            fitters.append(judge_fitter(scores, name))
    fitters += _reader_fitters(o, inputs)
    table = leave_one_source_out(
        inputs.datasets, None if x is None else x.records, fitters=fitters, calibration=t.calibration,
        threshold=t.threshold, held_out=t.held_out, n_bootstrap=t.n_bootstrap, progress=clikit.status,
        jobs=o.jobs or 1,
    )  # fmt: skip
    return _TransferFitted(table)


def _finetune_stage(o: TrainOptions, inputs: Inputs, x: Extraction | None) -> Fitted:
    """A fine-tuned reader (`halluprobe.pipeline._finetune`; it reads text, not records)."""
    from halluprobe.pipeline._finetune import fit_finetune_stage

    return fit_finetune_stage(o, inputs, x)


FIT_STAGES: dict[str, FitStage] = {
    "dataset": FitStage(fit_dataset_stage),
    "general": FitStage(fit_general_stage),
    "transfer": FitStage(
        fit_transfer_stage, reads=lambda o: bool(o.feature_sets) or o.published or o.transfer.judge
    ),
    "finetune": FitStage(lambda o, inputs, x: _finetune_stage(o, inputs, x), reads=lambda o: False),
}
"""The fit stage of each kind of run (`halluprobe.pipeline._options.KINDS`)."""
