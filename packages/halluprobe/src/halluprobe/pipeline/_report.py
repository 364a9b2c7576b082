"""One dataset's fit, save and report (``halluprobe train`` without ``--general``).

`fit_dataset` fits a calibrated probe per feature set, `save_dataset` writes them as detectors and
`report_dataset` scores them on test beside the published detectors, text-only scores and grounding
floors, with the paired tests of block additions (`addition_tests`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from halubench_data import clikit
from halubench_data.files import atomic_write_bytes

from halluprobe.blocks._blocks import parse_feature_set
from halluprobe.training._protocol import ProbeFit, train_feature_sets

if TYPE_CHECKING:
    from halluprobe.evaluation._evaluation import DatasetEvaluation, PairedTest

ADDITIONS = (("H64", "A7H64"), ("L9", "A7L9"), ("H64", "A64H64"))
"""Block additions tested with the paired group bootstrap when both sets were fitted."""


def _split_arrays(ds, split: str) -> tuple[np.ndarray, list[str]]:
    part = ds.split(split)
    return np.asarray(part.labels, dtype=np.int64), [str(g) for g in part.groups]


@dataclass
class DatasetFit:
    """The fit stage's result on one dataset: a calibrated probe per feature set and what they read."""

    dataset: Any
    """The ``halubench_data.Dataset``."""
    records: dict[str, list]
    """``{"train", "validation", "test"}`` records, one per example of the split, in order."""
    order: list[int]
    """Flat head indices ranked by induction score."""
    induction: np.ndarray
    """``[NL, H]`` induction scores of the proxy (written to ``induction.json``)."""
    fits: dict[str, ProbeFit]
    """``{feature set: calibrated probe with its threshold}``."""
    token_probe: Any = None
    """The token probe (localisation), when fitted."""
    extra: dict[str, object] = field(default_factory=dict)
    """More of ``results.json`` (the token probe's choices and span scores)."""


def fit_dataset(
    ds, records, ext, feature_sets: list[str], *, token_examples: dict | None = None,
    token_view: str = "mean", token_cv: int = 0, **selections,
) -> DatasetFit:  # fmt: skip
    """Blocks, fit, calibration and threshold of each feature set (`train_feature_sets`); the token probe.

    ``selections`` (``a7_features``, ``l9_features``) replace the packaged A7/L9 selections.
    With ``token_examples`` (``{"train", "validation", "test"}`` lists of
    `halluprobe.features.TokenExample`), a token probe is fitted with the same protocol and scored
    on test (token AUROC, character span F1); ``token_view`` names the `halluprobe.features.TOKEN_VIEWS`
    entry those examples were built with; ``token_cv`` > 0 makes its choices by that many folds of group
    cross-validation over the training and validation answers (`halluprobe.localisation.fit_token_probe_cv`).
    """
    from halluprobe.blocks._induction import induction_scores, rank_heads

    for s in feature_sets:
        parse_feature_set(s)
    labels = {split: _split_arrays(ds, split)[0] for split in ("train", "validation")}
    n_layers = int(ext.model.config.num_hidden_layers)
    layers = ext.layers if ext.layers is not None else tuple(range(n_layers))
    clikit.status("ranking induction heads on the proxy")
    ind = induction_scores(ext.model)
    order = rank_heads(ind, layers)
    fits = train_feature_sets(
        feature_sets, order, records["train"], labels["train"], _split_arrays(ds, "train")[1],
        records["validation"], labels["validation"], progress=clikit.status,
        val_sources=[e.source for e in ds.validation], **selections,
    )  # fmt: skip
    result = DatasetFit(ds, records, order, ind, fits)
    if token_examples is not None:
        from dataclasses import asdict

        from halluprobe.localisation._localisation import fit_and_evaluate

        clikit.status("fitting the token probe (localisation)")
        tp, span_result = fit_and_evaluate(token_examples, view=token_view, cv_folds=token_cv)
        result.token_probe = tp
        result.extra["localisation"] = {
            "C": tp.C, "cv_folds": token_cv, "val_token_auroc": tp.val_auroc,
            **{k: getattr(tp, k) for k in ("window", "smooth", "gap", "view")}, **asdict(span_result),
        }  # fmt: skip
    return result


def save_dataset(fit: DatasetFit, ext, out: Path, *, proxy) -> dict[str, Path]:
    """Every probe as a detector folder ``out/detectors/<feature set>``; returns them by feature set."""
    from halluprobe.detectors._detector import Detector

    saved = {}
    for name, probe in fit.fits.items():
        det = Detector.from_probe(
            probe,
            proxy=proxy,
            layers=ext.layers,
            hidden_layers=ext.hidden_layers,
            token_probe=fit.token_probe,
        )
        saved[name] = det.save(out / "detectors" / name)
    return saved


def report_dataset(fit: DatasetFit, ext, out: Path, *, published: bool = True, toha: bool = False) -> str:
    """Test scores of the probes beside the published detectors, text-only scores and grounding floors.

    Writes ``results.json``, ``report.md`` (with plots) and ``induction.json``; returns the Markdown
    results table.
    """
    from flashstats_hf import LOGIT_STAT_NAMES
    from halubench_data import text_only_scores
    from halubench_data.floors import best_floor, floor_scores
    from halubench_data.metrics import results_table

    from halluprobe.evaluation._evaluation import MethodScores, evaluate_methods, write_results
    from halluprobe.evaluation._report import write_report
    from halluprobe.evaluation._report_calibration import calibration_section

    ds, records = fit.dataset, fit.records
    layers = ext.layers if ext.layers is not None else tuple(range(int(ext.model.config.num_hidden_layers)))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        out / "induction.json",
        json.dumps({"layers": list(layers), "scores": fit.induction.tolist()}).encode(),
    )
    labels, groups = {}, {}
    for split in ("train", "validation", "test"):
        labels[split], groups[split] = _split_arrays(ds, split)
    y_val = labels["validation"]
    methods = []
    for name, probe in fit.fits.items():
        val_s, test_s = (
            probe.predict_proba(records["validation"])[:, 1],
            probe.predict_proba(records["test"])[:, 1],
        )
        methods.append(MethodScores(name, "probe", val_s, test_s, probe.threshold))
    if published:
        from halluprobe.detectors._published_fit import published_scores

        clikit.status("fitting the published detectors")
        for name, sc in published_scores(records, labels, fit.order, list(LOGIT_STAT_NAMES), toha).items():
            methods.append(
                MethodScores.chosen_on_validation(name, "detector", sc["validation"], sc["test"], y_val)
            )
    for name, (val_s, test_s) in text_only_scores(ds).items():
        methods.append(
            MethodScores.chosen_on_validation(f"text-only {name}", "text-only", val_s, test_s, y_val)
        )
    clikit.status("scoring the grounding floors")
    for name, (val_s, test_s) in floor_scores(ds).items():
        methods.append(MethodScores.chosen_on_validation(name, "floor", val_s, test_s, y_val))
    ev = evaluate_methods(ds.name, methods, labels["test"], groups["test"])
    tests = addition_tests(ev)
    floor = best_floor({name: r.auroc for name, r in ev.results.items()})
    table = results_table(dict(ev.results), floor=None if floor is None else floor[1])
    extra = {**fit.extra, "best_floor": None if floor is None else {"method": floor[0], "auroc": floor[1]}}
    selection = {
        n: {"C": f.C, "threshold": f.threshold, "val_auroc": f.val_auroc, **f.selection}
        for n, f in fit.fits.items()
    }
    write_results(out, [ev], tests, extra={"selection": selection, **extra}, plots=False)
    test_scores = {name: m.test for name, m in ev.methods.items()}
    test_probs = {n: test_scores[n] for n in fit.fits}
    both = len(set(labels["test"].tolist())) == 2
    section = calibration_section(out, test_probs, labels["test"]) if both else ""
    write_report(out, table, test_scores, labels["test"], fit.fits, tests, ds.name, extra_sections=section)
    return table


def run_training(
    ds, records, ext, feature_sets: list[str], out: Path, *, proxy, published: bool = True,
    toha: bool = False, token_examples: dict | None = None, token_view: str = "mean", token_cv: int = 0,
    **selections,
) -> str:  # fmt: skip
    """`fit_dataset`, `save_dataset` and `report_dataset` in one call; returns the results table.

    The probes' detectors carry the token probe when ``token_examples`` are given (their predictions
    then carry its spans; its scores are in ``results.json`` under ``"localisation"``).
    """
    fit = fit_dataset(
        ds, records, ext, feature_sets, token_examples=token_examples, token_view=token_view,
        token_cv=token_cv, **selections,
    )  # fmt: skip
    save_dataset(fit, ext, out, proxy=proxy)
    return report_dataset(fit, ext, out, published=published, toha=toha)


def addition_tests(ev: DatasetEvaluation, n: int = 100_000) -> tuple[PairedTest, ...]:
    """Paired group bootstrap of test F1 for each evaluated block addition, Holm-corrected together.

    Every pair of `ADDITIONS` whose two feature sets are methods of ``ev`` is tested with ``n``
    resamples (seed 42).
    """
    from halluprobe.evaluation._evaluation import holm_families, paired_test

    return holm_families(
        paired_test(ev, base, full, "f1", family="additions", key="f1", n=n)
        for base, full in ADDITIONS
        if base in ev.methods and full in ev.methods
    )
