"""The body of ``halluprobe train``: protocol, published detectors, baselines, tests, report, detectors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from halubench_data import clikit
from halubench_data.files import atomic_write_bytes
from halubench_data.metrics import best_by_validation

from halluprobe.blocks._blocks import parse_feature_set
from halluprobe.training._protocol import CS, train_feature_sets

if TYPE_CHECKING:
    from halluprobe.evaluation._evaluation import DatasetEvaluation, PairedTest

ADDITIONS = (("H64", "A7H64"), ("L9", "A7L9"), ("H64", "A64H64"))
"""Block additions tested with the paired group bootstrap when both sets were fitted."""


def _split_arrays(ds, split: str) -> tuple[np.ndarray, list[str]]:
    part = ds.split(split)
    return np.asarray(part.labels, dtype=np.int64), [str(g) for g in part.groups]


def fit_published(records, labels, order, logit_names, toha: bool) -> dict[str, Callable[[list], np.ndarray]]:
    """Fit the published detectors (each picks its setting on validation); return their scorers.

    Supervised ones (Lookback Lens, SinkProbe) fit on train with ``C`` by validation AUROC; LLM-Check,
    INTRYGUE and TOHA choose their setting on validation; RAUQ has none. A scorer maps records of any
    dataset to ``[n]`` scores (higher = more likely hallucinated), so a detector fitted here can be
    tested on another dataset (transfer).
    """
    from halubench_data.metrics import auroc

    from halluprobe.detectors import _published as d

    tr, va = records["train"], records["validation"]
    y_tr, y_va = labels["train"], labels["validation"]
    out: dict[str, Callable[[list], np.ndarray]] = {}

    def supervised(name, cls, matrix):
        def fit(c):
            det = cls(C=c).fit(matrix(tr), y_tr)
            return auroc(det.raw_score(matrix(va)), y_va), det

        _, _, det = best_by_validation(CS, fit)  # fit on train, C by validation AUROC (ties to the smaller C)
        out[name] = lambda recs: det.raw_score(matrix(recs))

    def chosen_on_validation(name, det, matrix):
        det.fit(matrix(va), y_va)
        out[name] = lambda recs: det.raw_score(matrix(recs))

    supervised("LookbackLens", d.LookbackLens, d.lookback_matrix)
    chosen_on_validation("LookbackLens (<=10 heads)", d.LookbackLensHeads(), d.lookback_matrix)
    supervised("SinkProbe", d.SinkProbe, lambda r: d.sink_matrix(r, 1))
    chosen_on_validation("LLM-Check", d.LLMCheckAttention(), d.logdiag_matrix)
    ent = logit_names.index("entropy")
    chosen_on_validation("INTRYGUE", d.INTRYGUE(head_order=order), lambda r: d.intrygue_matrix(r, ent))
    chosen_on_validation(
        "INTRYGUE sink rate", d.SinkRate(head_order=order), lambda r: d.intrygue_matrix(r, ent)
    )
    if toha:
        chosen_on_validation("TOHA", d.TOHA(), d.toha_matrix)
    rauq, lp = d.RAUQ().fit(), logit_names.index("answer_logprob")
    out["RAUQ"] = lambda recs: rauq.raw_score(d.rauq_matrix(recs, lp))
    return out


def published_scores(records, labels, order, logit_names, toha: bool) -> dict[str, dict[str, np.ndarray]]:
    """Validation and test scores of the published detectors (`fit_published`).

    Returns:
        dict[str, dict[str, np.ndarray]]: ``{name: {"validation": [n_val], "test": [n_test]}}``, higher =
        more likely hallucinated.
    """
    scorers = fit_published(records, labels, order, logit_names, toha)
    return {
        name: {"validation": score(records["validation"]), "test": score(records["test"])}
        for name, score in scorers.items()
    }


def run_training(
    ds, records, ext, feature_sets: list[str], out: Path, *, proxy, published: bool = True,
    toha: bool = False, token_examples: dict | None = None, token_view: str = "mean", token_cv: int = 0,
    **selections,
) -> str:  # fmt: skip
    """Fit, evaluate and report; returns the Markdown results table printed by the CLI.

    ``selections`` (``a7_features``, ``l9_features``) replace the packaged A7/L9 selections.
    With ``token_examples`` (``{"train", "validation", "test"}`` lists of
    `halluprobe.features.TokenExample`), a token probe is fitted with the same protocol, scored
    on test (token AUROC, character span F1, in ``results.json`` under ``"localisation"``) and saved
    with every detector, whose predictions then carry its spans; ``token_view`` names the
    `halluprobe.features.TOKEN_VIEWS` entry those examples were built with; ``token_cv`` > 0 makes
    the token probe's choices by that many folds of group cross-validation over the training and
    validation answers and fits it on both (`halluprobe.localisation.fit_token_probe_cv`).
    """
    from flashstats_hf import LOGIT_STAT_NAMES
    from halubench_data import text_only_scores
    from halubench_data.metrics import results_table

    from halluprobe.blocks._induction import induction_scores, rank_heads
    from halluprobe.detectors._detector import Detector

    for s in feature_sets:
        parse_feature_set(s)
    out.mkdir(parents=True, exist_ok=True)
    labels, groups = {}, {}
    for split in ("train", "validation", "test"):
        labels[split], groups[split] = _split_arrays(ds, split)
    n_layers = int(ext.model.config.num_hidden_layers)
    layers = ext.layers if ext.layers is not None else tuple(range(n_layers))
    clikit.status("ranking induction heads on the proxy")
    ind = induction_scores(ext.model)
    order = rank_heads(ind, layers)
    atomic_write_bytes(
        out / "induction.json", json.dumps({"layers": list(layers), "scores": ind.tolist()}).encode()
    )
    fits = train_feature_sets(
        feature_sets, order, records["train"], labels["train"], groups["train"], records["validation"],
        labels["validation"], progress=clikit.status, val_sources=[e.source for e in ds.validation],
        **selections,
    )  # fmt: skip
    from halluprobe.evaluation._evaluation import MethodScores, evaluate_methods, write_results

    token_probe = None
    extra: dict[str, object] = {}
    if token_examples is not None:
        from dataclasses import asdict

        from halluprobe.localisation._localisation import fit_and_evaluate

        clikit.status("fitting the token probe (localisation)")
        token_probe, span_result = fit_and_evaluate(token_examples, view=token_view, cv_folds=token_cv)
        extra["localisation"] = {
            "C": token_probe.C,
            "cv_folds": token_cv,
            "val_token_auroc": token_probe.val_auroc,
            **{k: getattr(token_probe, k) for k in ("window", "smooth", "gap", "view")},
            **asdict(span_result),
        }
    y_val = labels["validation"]
    methods = []
    for name, fit in fits.items():
        val_s, test_s = (
            fit.predict_proba(records["validation"])[:, 1],
            fit.predict_proba(records["test"])[:, 1],
        )
        methods.append(MethodScores(name, "probe", val_s, test_s, fit.threshold))
        Detector.from_probe(
            fit, proxy=proxy, layers=ext.layers, hidden_layers=ext.hidden_layers, token_probe=token_probe
        ).save(out / "detectors" / name)
    if published:
        clikit.status("fitting the published detectors")
        pub = published_scores(records, labels, order, list(LOGIT_STAT_NAMES), toha)
        for name, sc in pub.items():
            methods.append(
                MethodScores.chosen_on_validation(name, "detector", sc["validation"], sc["test"], y_val)
            )
    for name, (val_s, test_s) in text_only_scores(ds).items():
        methods.append(
            MethodScores.chosen_on_validation(f"text-only {name}", "text-only", val_s, test_s, y_val)
        )
    from halubench_data.floors import best_floor, floor_scores

    clikit.status("scoring the grounding floors")
    for name, (val_s, test_s) in floor_scores(ds).items():
        methods.append(MethodScores.chosen_on_validation(name, "floor", val_s, test_s, y_val))
    ev = evaluate_methods(ds.name, methods, labels["test"], groups["test"])
    tests = addition_tests(ev)
    floor = best_floor({name: r.auroc for name, r in ev.results.items()})
    table = results_table(dict(ev.results), floor=None if floor is None else floor[1])
    extra["best_floor"] = None if floor is None else {"method": floor[0], "auroc": floor[1]}
    from halluprobe.evaluation._report import write_report

    selection = {
        n: {"C": f.C, "threshold": f.threshold, "val_auroc": f.val_auroc, **f.selection}
        for n, f in fits.items()
    }
    write_results(out, [ev], tests, extra={"selection": selection, **extra}, plots=False)
    test_scores = {name: m.test for name, m in ev.methods.items()}
    from halluprobe.evaluation._report_calibration import calibration_section

    test_probs = {n: test_scores[n] for n in fits}
    section = (
        calibration_section(out, test_probs, labels["test"]) if len(set(labels["test"].tolist())) == 2 else ""
    )
    write_report(out, table, test_scores, labels["test"], fits, tests, ds.name, extra_sections=section)
    return table


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
