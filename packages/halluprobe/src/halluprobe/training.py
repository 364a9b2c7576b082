"""The body of ``halluprobe train``: protocol, published detectors, baselines, tests, report, detectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from halubench_data import clikit

from halluprobe.blocks import parse_feature_set
from halluprobe.cache import atomic_write_bytes
from halluprobe.protocol import CS, train_feature_sets

ADDITIONS = (("H64", "A7H64"), ("L9", "A7L9"), ("H64", "A64H64"))
"""Block additions tested with the paired group bootstrap when both sets were fitted."""


def _split_arrays(ds, split: str) -> tuple[np.ndarray, list[str]]:
    part = ds.split(split)
    return np.asarray(part.labels, dtype=np.int64), [str(g) for g in part.groups]


def published_scores(records, labels, order, logit_names, toha: bool) -> dict[str, dict[str, np.ndarray]]:
    """Validation and test scores of the published detectors (each picks its setting on validation).

    Returns:
        ``{name: {"validation": [n_val], "test": [n_test]}}``, higher = more likely hallucinated.
    """
    from halubench_data.metrics import auroc

    from halluprobe import detectors as d

    tr, va, te = records["train"], records["validation"], records["test"]
    y_tr, y_va = labels["train"], labels["validation"]
    out: dict[str, dict[str, np.ndarray]] = {}

    def supervised(name, cls, matrix):
        best = None
        for c in CS:  # fit on train, C by validation AUROC (ties to the smaller C)
            det = cls(C=c).fit(matrix(tr), y_tr)
            a = auroc(det.raw_score(matrix(va)), y_va)
            if best is None or a > best[0]:
                best = (a, det)
        out[name] = {"validation": best[1].raw_score(matrix(va)), "test": best[1].raw_score(matrix(te))}

    def chosen_on_validation(name, det, matrix):
        det.fit(matrix(va), y_va)
        out[name] = {"validation": det.raw_score(matrix(va)), "test": det.raw_score(matrix(te))}

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

    def rauq_in(recs):
        return [(prev, np.exp(logp)) for prev, logp in d.rauq_inputs(recs, lp)]

    out["RAUQ"] = {
        "validation": rauq.decision_function(rauq_in(va)),
        "test": rauq.decision_function(rauq_in(te)),
    }
    return out


def run_training(
    ds,
    records,
    ext,
    feature_sets: list[str],
    out: Path,
    *,
    proxy,
    published: bool = True,
    toha: bool = False,
    **selections,
) -> str:
    """Fit, evaluate and report; returns the Markdown results table printed by the CLI.

    ``selections`` (``a7_features``, ``l9_features``) replace the packaged A7/L9 selections.
    """
    from flashstats_hf import LOGIT_STAT_NAMES
    from halubench_data import text_only_baselines
    from halubench_data.metrics import evaluate, results_table, select_threshold

    from halluprobe.detector import Detector
    from halluprobe.induction import induction_scores, rank_heads

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
        labels["validation"], progress=print, **selections,
    )  # fmt: skip
    results, test_scores = {}, {}
    for name, fit in fits.items():
        test_scores[name] = fit.predict_proba(records["test"])
        results[name] = evaluate(test_scores[name], labels["test"], groups["test"], fit.threshold)
        Detector(fit, proxy, ext.layers, ext.hidden_layers).save(out / "detectors" / name)
    if published:
        clikit.status("fitting the published detectors")
        pub = published_scores(records, labels, order, list(LOGIT_STAT_NAMES), toha)
        for name, sc in pub.items():
            thr = select_threshold(sc["validation"], labels["validation"])
            test_scores[name] = sc["test"]
            results[name] = evaluate(sc["test"], labels["test"], groups["test"], thr)
    for name, res in text_only_baselines(ds).items():
        results[f"text-only {name}"] = res
    tests = _addition_tests(fits, test_scores, labels["test"], groups["test"])
    table = results_table(results)
    from halluprobe.report import write_report

    write_report(out, table, results, test_scores, labels["test"], fits, tests, ds.name)
    return table


def _addition_tests(fits, test_scores, y, groups) -> list[dict[str, Any]]:
    """Paired group bootstrap (100,000 resamples, seed 42) of F1 for each block addition, Holm-corrected."""
    from halubench_data.metrics import holm, paired_bootstrap

    rows: list[dict[str, Any]] = []
    for base, full in ADDITIONS:
        if base in fits and full in fits:
            res = paired_bootstrap(
                test_scores[base], test_scores[full], y, groups, "f1", n=100_000, seed=42,
                thresholds=(fits[base].threshold, fits[full].threshold),
            )  # fmt: skip
            rows.append(
                {"comparison": f"{base} -> {full}", "delta": res.delta, "ci": res.ci, "p": res.p_value}
            )
    if rows:
        for row, p in zip(rows, holm([r["p"] for r in rows]), strict=True):
            row["p_holm"] = float(p)
    return rows
