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
    from halubench_data import text_only_scores

    names = {"length": "text-only length", "tfidf": "text-only TF-IDF"}
    return {names[k]: {"validation": v, "test": t} for k, (v, t) in text_only_scores(ds).items()}


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
            "validation": fit.predict_proba(recs["validation"])[:, 1],
            "test": fit.predict_proba(recs["test"])[:, 1],
            "threshold": fit.threshold,
            "kind": "probe",
        }
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
    best = max(FEATURE_SETS, key=lambda s: (fits[s].val_auroc, -FEATURE_SETS.index(s)))
    res = {
        "name": name,
        "fits": fits,
        "methods": methods,
        "labels": lab,
        "groups": grp,
        "selection": selection,
        "best_probe": best,
    }
    res["ev"] = _evaluation(res, _STATE["n_boot"])
    res["results"] = dict(res["ev"].results)
    res["tests"] = _guarded(f"tests {name}", lambda: dataset_tests(name, res, _STATE["n_paired"]), [])
    return res


def _evaluation(fitted: dict, n_boot: int):
    """The typed evaluation (`halluprobe.evaluation`) of every method of one dataset."""
    from halluprobe.evaluation import MethodScores, evaluate_methods

    methods = [
        MethodScores(m, s["kind"], s["validation"], s["test"], s["threshold"])
        for m, s in fitted["methods"].items()
    ]
    y, g = fitted["labels"]["test"], fitted["groups"]["test"]
    return evaluate_methods(fitted["name"], methods, y, g, n_bootstrap=n_boot)


def _paired(fitted, a: str, b: str, metric: str, n: int, family: str, key: str, **extra) -> dict:
    """One paired group bootstrap (`halluprobe.evaluation.paired_test`) as a report row."""
    from halluprobe.evaluation import paired_test

    t = paired_test(fitted["ev"], a, b, metric, family=family, key=key, n=n)  # type: ignore[arg-type]
    head = {"family": t.family, "key": t.key, "dataset": t.dataset, **extra}
    return {**head, "a": t.a, "b": t.b, "metric": t.metric, "delta": t.delta, "ci": list(t.ci), "p": t.p}


def dataset_tests(d: str, f: dict, n: int) -> list[dict]:
    """Raw paired bootstrap tests of one dataset (Holm across datasets: :func:`holm_families`)."""
    rows = []
    for base, full in ADDITIONS:
        for metric in ("f1", "auroc"):
            rows.append(_paired(f, base, full, metric, n, "additions", f"{base}->{full}/{metric}"))
    judge = [m for m, s in f["methods"].items() if s["kind"] == "judge"]
    for probe in dict.fromkeys(("A64H64", f["best_probe"])) if judge else ():
        for metric in ("f1", "auroc"):
            rows.append(_paired(f, judge[0], probe, metric, n, "probe_vs_judge", metric, probe=probe))
    if d == "ragtruth_qa":
        for base in ("text-only TF-IDF", "text-only length"):
            for m, s in f["methods"].items():
                if s["kind"] in ("probe", "detector"):
                    rows.append(_paired(f, base, m, "auroc", n, "vs_text_only", base))
    return rows


def holm_families(rows: list[dict]) -> dict:
    """Holm-correct each family of tests (an addition and metric over datasets; probe vs judge per metric;
    every detector vs one text-only baseline), through `halluprobe.evaluation.holm_families`."""
    from halluprobe.evaluation import PairedTest
    from halluprobe.evaluation import holm_families as holm_within

    fields = ("family", "key", "dataset", "a", "b", "metric", "delta", "ci", "p")
    adjusted = holm_within(PairedTest(**{k: r[k] for k in fields}) for r in rows)
    out: dict = {"additions": [], "probe_vs_judge": [], "vs_text_only": []}
    for fam, key in dict.fromkeys((r["family"], r["key"]) for r in rows):  # grouped, in first-seen order
        out[fam] += [{**r, "p_holm": t.p_holm} for r, t in zip(rows, adjusted, strict=True) if r["key"] == key
                     and r["family"] == fam]  # fmt: skip
    return out


def _transfer(score, threshold, recs, ds, fit: str, test: str, method: str, n_boot: int) -> dict:
    """One transfer row (`halluprobe.evaluation.transfer`): ``score`` at its fitting threshold on ``ds``."""
    from halluprobe.evaluation import transfer

    y, g = np.asarray(ds.labels), [str(x) for x in ds.groups]
    t = transfer(score, threshold, recs, y, g, fit=fit, test=test, method=method, n_bootstrap=n_boot)
    return {"fit": t.fit, "test": t.test, "method": t.method, "result": t.result}


def _probability(fit):
    """``records -> [n]`` probability of "hallucinated" of a fitted probe (column 1 of ``predict_proba``)."""
    return lambda recs: fit.predict_proba(recs)[:, 1]


def cross_task(fitted_all: dict, datasets: dict, cache, n_boot: int) -> list[dict]:
    """Probes fitted on one RAGTruth task (train, validation-chosen C and threshold) tested on each task."""
    rows = []
    tasks = [t for t in data.RAGTRUTH_TASKS if t in fitted_all]
    for tgt in tasks:
        test = datasets[tgt].test
        recs = cache.load([e.id for e in test.examples])
        for src in tasks:
            for fs_name in TRANSFER_SETS:
                fit = fitted_all[src]["fits"][fs_name]
                rows.append(
                    _transfer(_probability(fit), fit.threshold, recs, test, src, tgt, fs_name, n_boot)
                )
    return rows


def pooled_to_claims(n_boot: int) -> list[dict]:
    """Probes and published detectors fitted on the three RAGTruth tasks pooled (paper Appendix M), tested
    on pooled RAGTruth and on the claim sets at their pooled-validation thresholds."""
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe import train_feature_sets
    from halluprobe.training import fit_published
    from halubench_data import concat, select_threshold

    datasets, cache, done = _STATE["datasets"], _STATE["cache"], _STATE["done"]
    pooled = concat([datasets[t] for t in data.RAGTRUTH_TASKS], "ragtruth_all")
    recs = _records(cache, pooled)
    lab, grp = _labels(pooled)
    fits = train_feature_sets(
        list(TRANSFER_SETS), _STATE["order"], recs["train"], lab["train"], grp["train"], recs["validation"],
        lab["validation"],
    )  # fmt: skip
    scorers = {n: (_probability(f), f.threshold) for n, f in fits.items()}
    published = fit_published(recs, lab, _STATE["order"], list(LOGIT_STAT_NAMES), toha=False)
    for name, score in published.items():
        scorers[name] = (score, float(select_threshold(score(recs["validation"]), lab["validation"])))
    rows = [  # in-domain reference: pooled RAGTruth test
        _transfer(score, thr, recs["test"], pooled.test, "ragtruth_all", "ragtruth_all", name, n_boot)
        for name, (score, thr) in scorers.items()
    ]
    judge = _STATE.get("judge")
    if judge:
        v = np.concatenate([judge["datasets"][t]["validation_scores"] for t in data.RAGTRUTH_TASKS])
        jthr, jname = float(select_threshold(v, lab["validation"])), f"SmolLM2 judge ({judge['template']})"
    for tgt in [c for c in data.CLAIMS if c in done]:
        ds = datasets[tgt]
        recs_t = cache.load([e.id for e in ds.examples])
        rows += [
            _transfer(sc, thr, recs_t, ds, "ragtruth_all", tgt, n, n_boot) for n, (sc, thr) in scorers.items()
        ]
        if judge and tgt in judge["datasets"]:
            s = np.asarray(judge["datasets"][tgt]["test_scores"])
            rows.append(_transfer(lambda _, s=s: s, jthr, None, ds, "ragtruth_all", tgt, jname, n_boot))
    return rows


def _job(spec: tuple):
    """One independent unit of the analysis (run in a worker process with few BLAS threads)."""
    import localisation
    from threadpoolctl import threadpool_limits

    kind, arg = spec
    threads = _STATE["threads"] if kind != "loc" else max(_STATE["threads"], (os.cpu_count() or 1) // 2)
    with threadpool_limits(threads):  # the token probes are the longest job: give them more threads
        if kind == "fit":
            return fit_dataset(arg)
        if kind == "pooled":
            return _guarded("pooled RAGTruth -> claims", lambda: pooled_to_claims(arg), [])
        tasks = tuple(t for t in data.RAGTRUTH_TASKS if t in _STATE["done"])
        return _guarded(
            "localisation",
            lambda: localisation.run(_STATE["datasets"], _STATE["work"] / "tokens", n_boot=arg, tasks=tasks),
            None,
        )


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
    settings = json.loads((work / "settings.json").read_text())  # written by the extract phase
    _STATE["datasets"] = data.load(data_dir)
    _STATE["cache"] = FeatureCache(work / "cache", settings)
    _STATE["order"] = rank_heads(np.asarray(ext["induction"]), tuple(ext["layers"]))
    judge_path = work / "judge.json"
    _STATE["judge"] = json.loads(judge_path.read_text()) if judge_path.exists() else None
    _STATE["extract"] = ext


def analyze(data_dir: Path, work: Path, out: Path, n_boot: int = 10_000, n_paired: int = 100_000) -> None:
    """The whole analysis; writes ``out`` (tables, plots, JSON)."""
    import report

    _load_state(Path(data_dir), Path(work))
    done = _STATE["done"] = set(_STATE["extract"].get("complete", data.ALL))
    _STATE.update(work=Path(work), n_boot=n_boot, n_paired=n_paired)
    names = [n for n in data.MAIN if n in done]
    jobs = [("fit", n) for n in names]
    if all(t in done for t in data.RAGTRUTH_TASKS):
        jobs.append(("pooled", max(1000, n_boot // 5)))
    if any(t in done for t in data.RAGTRUTH_TASKS):
        jobs.append(("loc", max(200, n_boot // 50)))
    cpus = os.cpu_count() or 1
    _STATE["threads"] = max(1, cpus // len(jobs))
    if cpus > 1 and len(jobs) > 1:
        with get_context("fork").Pool(min(len(jobs), cpus)) as pool:
            outs = pool.map(_job, jobs, chunksize=1)
    else:
        outs = [_job(j) for j in jobs]
    got = dict(zip(jobs, outs, strict=True))
    fitted = {n: got[("fit", n)] for n in names if got[("fit", n)] is not None}
    pooled_rows = next((v for (k, _), v in got.items() if k == "pooled"), [])
    loc = next((v for (k, _), v in got.items() if k == "loc"), None)
    print("analyze: fitted", ", ".join(fitted), flush=True)
    results = {n: f["results"] for n, f in fitted.items()}
    test_res = _guarded("tests", lambda: holm_families([r for f in fitted.values() for r in f["tests"]]), {})
    report.write(
        out, fitted, results, test_res, {"rows": pooled_rows}, loc, None, _STATE["extract"], _STATE["judge"]
    )
    cross = _guarded(
        "cross-task",
        lambda: cross_task(fitted, _STATE["datasets"], _STATE["cache"], max(1000, n_boot // 5)),
        [],
    )
    trans = {"rows": cross + pooled_rows}
    cost = json.loads((Path(work) / "cost.json").read_text()) if (Path(work) / "cost.json").exists() else None
    report.write(out, fitted, results, test_res, trans, loc, cost, _STATE["extract"], _STATE["judge"])
