"""Analysis phase: fit every detector on train, choose settings on validation, test once.

Nothing here looks at test labels before the final scoring: feature-set probes follow halluprobe's
protocol (:func:`halluprobe.train_feature_sets`), the published detectors choose their setting on
validation (``halluprobe.training.published_scores``), the judge's template and threshold come from the
judge phase (validation only), and the text-only baselines choose C / direction and threshold on
validation.
"""

from __future__ import annotations

import json
import os
from multiprocessing import get_context
from pathlib import Path

import data
import numpy as np

FEATURE_SETS = ("A7", "A64", "H64", "L9", "A7H64", "A64H64", "A7L9", "A64L9", "ALL")
"""Feature-set probes of the main table (``ALL`` = A7 + A64 + H64 + L9)."""
ADDITIONS = (("H64", "A7H64"), ("L9", "A7L9"), ("H64", "A64H64"), ("L9", "A64L9"))
"""Block additions tested with the paired group bootstrap (Holm over the datasets of each addition)."""
TRANSFER_SETS = ("A7", "A64", "H64", "L9", "A64H64", "ALL")
"""Probes evaluated out of their fitting task."""

_STATE: dict = {}


def _records(cache, ds):
    out = {}
    for split in ("train", "validation", "test"):
        part = ds.split(split)
        out[split] = cache.load([e.id for e in part.examples])
    return out


def _labels(ds):
    lab, grp = {}, {}
    for split in ("train", "validation", "test"):
        part = ds.split(split)
        lab[split], grp[split] = np.asarray(part.labels, dtype=np.int64), [str(g) for g in part.groups]
    return lab, grp


def _text_only(ds) -> dict:
    """Validation and test scores of the length and answer-only TF-IDF baselines."""
    from halubench_data import answer_lengths, auroc
    from halubench_data.baselines import tfidf_scores

    val, test = ds.validation, ds.test
    v_len = answer_lengths(val).astype(float)
    sign = 1.0 if auroc(v_len, val.labels) >= 0.5 else -1.0
    tf_val, tf_test, _ = tfidf_scores(ds)
    return {
        "text-only length": {"validation": sign * v_len, "test": sign * answer_lengths(test).astype(float)},
        "text-only TF-IDF": {"validation": tf_val, "test": tf_test},
    }


def _judge_scores(judge: dict | None, name: str, ds) -> dict:
    if not judge or name not in judge["datasets"]:
        return {}
    j = judge["datasets"][name]
    if j["test_ids"] != [e.id for e in ds.test.examples]:
        raise ValueError(f"judge test ids of {name} do not match the frozen dataset; rerun the judge phase")
    label = f"SmolLM2 judge ({judge['template']})"
    return {label: {"validation": np.asarray(j["validation_scores"]), "test": np.asarray(j["test_scores"])}}


def fit_dataset(name: str) -> dict | None:
    """:func:`fit_one`, or ``None`` (with the error printed) when the dataset cannot be fitted."""
    return _guarded(f"fit {name}", lambda: fit_one(name), None)


def fit_one(name: str) -> dict:
    """Everything of one dataset: fits, validation/test scores and thresholds of every method."""
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe import train_feature_sets
    from halluprobe.training import published_scores
    from halubench_data import select_threshold

    ds, cache, order = _STATE["datasets"][name], _STATE["cache"], _STATE["order"]
    recs = _records(cache, ds)
    lab, grp = _labels(ds)
    fits = train_feature_sets(
        list(FEATURE_SETS),
        order,
        recs["train"],
        lab["train"],
        grp["train"],
        recs["validation"],
        lab["validation"],
    )
    methods = {}
    for fs_name, fit in fits.items():
        methods[fs_name] = {
            "validation": fit.predict_proba(recs["validation"]), "test": fit.predict_proba(recs["test"]),
            "threshold": fit.threshold, "kind": "probe",
        }  # fmt: skip
    toha = bool(recs["train"] and recs["train"][0].mtopdiv.size)
    pub = published_scores(recs, lab, order, list(LOGIT_STAT_NAMES), toha)
    others = {**pub, **_judge_scores(_STATE.get("judge"), name, ds), **_text_only(ds)}
    for m, sc in others.items():
        kind = (
            "judge" if m.startswith("SmolLM2") else ("text-only" if m.startswith("text-only") else "detector")
        )
        methods[m] = {
            **sc,
            "threshold": float(select_threshold(sc["validation"], lab["validation"])),
            "kind": kind,
        }
    selection = {k: {"C": f.C, "val_auroc": f.val_auroc, **f.selection} for k, f in fits.items()}
    return {
        "name": name,
        "fits": fits,
        "methods": methods,
        "labels": lab,
        "groups": grp,
        "selection": selection,
    }


def _evaluate_all(fitted: dict, n_boot: int) -> dict:
    from halubench_data import evaluate

    y, g = fitted["labels"]["test"], fitted["groups"]["test"]
    return {
        m: evaluate(s["test"], y, g, s["threshold"], n_bootstrap=n_boot) for m, s in fitted["methods"].items()
    }


def _paired(fitted, a: str, b: str, metric: str, n: int) -> dict:
    from halubench_data import paired_bootstrap

    ma, mb = fitted["methods"][a], fitted["methods"][b]
    y, g = fitted["labels"]["test"], fitted["groups"]["test"]
    thr = (ma["threshold"], mb["threshold"]) if metric != "auroc" else None
    res = paired_bootstrap(ma["test"], mb["test"], y, g, metric, n=n, seed=42, thresholds=thr)
    return {"a": a, "b": b, "metric": metric, "delta": res.delta, "ci": list(res.ci), "p": res.p_value}


def _holm_rows(rows: list[dict]) -> list[dict]:
    from halubench_data import holm

    if rows:
        for row, p in zip(rows, holm([r["p"] for r in rows]), strict=True):
            row["p_holm"] = float(p)
    return rows


def tests(fitted_all: dict, n: int) -> dict:
    """Paired bootstrap tests (Holm within each family) of the paper's claims."""
    out = {"additions": [], "probe_vs_judge": [], "vs_text_only": []}
    for base, full in ADDITIONS:
        for metric in ("f1", "auroc"):
            rows = [{"dataset": d, **_paired(f, base, full, metric, n)} for d, f in fitted_all.items()]
            out["additions"] += _holm_rows(rows)
    for d, f in fitted_all.items():
        judge = [m for m, s in f["methods"].items() if s["kind"] == "judge"]
        if not judge:
            continue
        best = max(FEATURE_SETS, key=lambda s: (f["fits"][s].val_auroc, -FEATURE_SETS.index(s)))
        f["best_probe"] = best
        for probe in dict.fromkeys(("A64H64", best)):
            for metric in ("f1", "auroc"):
                out["probe_vs_judge"].append(
                    {"dataset": d, "probe": probe, **_paired(f, judge[0], probe, metric, n)}
                )
    for metric in ("f1", "auroc"):
        fam = [r for r in out["probe_vs_judge"] if r["metric"] == metric]
        _holm_rows(fam)
    if "ragtruth_qa" in fitted_all:
        f = fitted_all["ragtruth_qa"]
        for base in ("text-only TF-IDF", "text-only length"):
            rows = [
                _paired(f, base, m, "auroc", n)
                for m, s in f["methods"].items()
                if s["kind"] in ("probe", "detector")
            ]
            out["vs_text_only"] += _holm_rows(rows)
    return out


def _apply(fit, recs, y, groups, n_boot):
    from halubench_data import evaluate

    s = fit.predict_proba(recs)
    return evaluate(s, y, groups, fit.threshold, n_bootstrap=n_boot), s


def transfer(fitted_all: dict, datasets: dict, cache, n_boot: int, done=frozenset(data.ALL)) -> dict:
    """Cross-task transfer among RAGTruth tasks, and pooled RAGTruth -> claim sets."""
    from halluprobe import train_feature_sets
    from halubench_data import concat, evaluate, select_threshold

    rows = []
    tasks = [t for t in data.RAGTRUTH_TASKS if t in fitted_all]
    for src in tasks:
        for tgt in tasks:
            ds = datasets[tgt]
            recs = cache.load([e.id for e in ds.test.examples])
            y, g = np.asarray(ds.test.labels), [str(x) for x in ds.test.groups]
            for fs_name in TRANSFER_SETS:
                res, _ = _apply(fitted_all[src]["fits"][fs_name], recs, y, g, n_boot)
                rows.append({"fit": src, "test": tgt, "method": fs_name, "result": res})
    if len(tasks) < len(data.RAGTRUTH_TASKS):
        return {"rows": rows}
    pooled = concat([datasets[t] for t in data.RAGTRUTH_TASKS], "ragtruth_all")
    recs = _records(cache, pooled)
    lab, grp = _labels(pooled)
    fits = train_feature_sets(list(TRANSFER_SETS), _STATE["order"], recs["train"], lab["train"], grp["train"],
                              recs["validation"], lab["validation"])  # fmt: skip
    judge = _STATE.get("judge")
    jthr = None
    if judge:
        v = np.concatenate([judge["datasets"][t]["validation_scores"] for t in data.RAGTRUTH_TASKS])
        jthr = float(select_threshold(v, lab["validation"]))
    for fs_name, fit in fits.items():  # in-domain reference: pooled RAGTruth test
        res, _ = _apply(fit, recs["test"], lab["test"], grp["test"], n_boot)
        rows.append({"fit": "ragtruth_all", "test": "ragtruth_all", "method": fs_name, "result": res})
    for tgt in [c for c in data.CLAIMS if c in done]:
        ds = datasets[tgt]
        recs_t = cache.load([e.id for e in ds.examples])
        y, g = np.asarray(ds.labels), [str(x) for x in ds.groups]
        for fs_name, fit in fits.items():
            res, _ = _apply(fit, recs_t, y, g, n_boot)
            rows.append({"fit": "ragtruth_all", "test": tgt, "method": fs_name, "result": res})
        if judge and tgt in judge["datasets"]:
            s = np.asarray(judge["datasets"][tgt]["test_scores"])
            rows.append({"fit": "ragtruth_all", "test": tgt, "method": f"SmolLM2 judge ({judge['template']})",
                         "result": evaluate(s, y, g, jthr, n_bootstrap=n_boot)})  # fmt: skip
    return {"rows": rows}


def _guarded(stage: str, fn, default):
    """Run one analysis stage; a failure is reported and the other stages still write their results."""
    import traceback

    try:
        out = fn()
        print(f"analyze: {stage} done", flush=True)
        return out
    except Exception:  # noqa: BLE001 - one failing stage must not lose the others' results
        print(f"analyze: {stage} FAILED\n{traceback.format_exc()}", flush=True)
        return default


def _load_state(data_dir: Path, work: Path) -> None:
    from halluprobe import FeatureCache, rank_heads

    ext = json.loads((work / "extract.json").read_text())
    settings = json.loads((work / "cache" / "index.json").read_text())["settings"]
    _STATE["datasets"] = data.load(data_dir)
    _STATE["cache"] = FeatureCache(work / "cache", settings)
    _STATE["order"] = rank_heads(np.asarray(ext["induction"]), tuple(ext["layers"]))
    judge_path = work / "judge.json"
    _STATE["judge"] = json.loads(judge_path.read_text()) if judge_path.exists() else None
    _STATE["extract"] = ext


def analyze(data_dir: Path, work: Path, out: Path, n_boot: int = 10_000, n_paired: int = 100_000) -> None:
    """The whole analysis; writes ``out`` (tables, plots, JSON)."""
    import localisation
    import report

    _load_state(Path(data_dir), Path(work))
    done = set(_STATE["extract"].get("complete", data.ALL))
    names = [n for n in data.MAIN if n in done]
    procs = max(1, min(len(names), (os.cpu_count() or 1) - 1))
    if procs > 1:
        with get_context("fork").Pool(procs) as pool:
            fitted = dict(zip(names, pool.map(fit_dataset, names), strict=True))
    else:
        fitted = {n: fit_dataset(n) for n in names}
    fitted = {n: f for n, f in fitted.items() if f is not None}
    print("analyze: fitted", ", ".join(fitted), flush=True)
    results = {n: _evaluate_all(f, n_boot) for n, f in fitted.items()}
    test_res = _guarded("tests", lambda: tests(fitted, n_paired), {})
    trans = _guarded("transfer", lambda: transfer(fitted, _STATE["datasets"], _STATE["cache"], max(1000, n_boot // 5), done),
                     {"rows": []})  # fmt: skip
    tasks = tuple(t for t in data.RAGTRUTH_TASKS if t in done)
    loc = _guarded("localisation", lambda: localisation.run(_STATE["datasets"], Path(work) / "tokens",
                   n_boot=max(200, n_boot // 20), tasks=tasks), None)  # fmt: skip
    cost = json.loads((Path(work) / "cost.json").read_text()) if (Path(work) / "cost.json").exists() else None
    report.write(out, fitted, results, test_res, trans, loc, cost, _STATE["extract"], _STATE["judge"])
