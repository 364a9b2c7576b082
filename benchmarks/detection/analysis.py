"""Analysis phase: every method on every dataset through `halluprobe.evaluation`, and its tables.

Nothing here looks at test labels before the final scoring: the probes follow halluprobe's protocol, the
published detectors and the text-only baselines choose their settings on validation, the judge's template
and threshold come from the judge phase (validation only). Independent units (one per dataset, the pooled
transfer, the localisation) run in forked worker processes with few BLAS threads each.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import data
import numpy as np

PROXY = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)"


@dataclass(frozen=True)
class Inputs:
    """What every analysis unit reads (set once before the workers fork)."""

    datasets: dict
    cache: Any
    order: list
    judge: dict | None
    extract: dict
    work: Path
    done: frozenset
    n_boot: int
    n_paired: int
    threads: int
    token_views: tuple


_INPUTS: list[Inputs] = []


def _fit(name: str):
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe.evaluation import _suite as suite

    inp, ds = _INPUTS[0], _INPUTS[0].datasets[name]
    recs = suite.split_records(inp.cache.load, ds)
    judge = suite.judge_methods(inp.judge, ds)
    return suite.evaluate_dataset(ds, recs, inp.order, LOGIT_STAT_NAMES, extra=judge, n_bootstrap=inp.n_boot,
                                  n_paired=inp.n_paired)  # fmt: skip


def _pooled(n_boot: int):
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe.evaluation import _suite as suite
    from halubench_data import concat

    inp = _INPUTS[0]
    pooled = concat([inp.datasets[t] for t in data.RAGTRUTH_TASKS], "ragtruth_all")
    targets = {c: inp.datasets[c] for c in data.CLAIMS if c in inp.done}
    judge = suite.pooled_judge(inp.judge, data.RAGTRUTH_TASKS, targets)
    return suite.pooled_transfer(pooled, targets, inp.cache.load, inp.order, LOGIT_STAT_NAMES, judge=judge,
                                 n_bootstrap=n_boot)  # fmt: skip


def _localisation(n_boot: int):
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe.evaluation import _suite as suite

    split, tasks = _token_split("mean")
    logprob = split["train"][0][1].features.shape[1] - len(LOGIT_STAT_NAMES)  # first logit stat: logprob
    views = {v: _token_split(v)[0] for v in _INPUTS[0].token_views}
    return suite.localisation_runs(split, logprob, tasks, n_bootstrap=n_boot, views=views)


def _token_split(view: str) -> tuple[dict, list]:
    """``({split: [(task, TokenExample)]}, tasks)`` of the extracted RAGTruth tasks in one token view."""
    from halluprobe.features import TokenStore

    inp = _INPUTS[0]
    store, tasks = TokenStore(inp.work / "tokens"), [t for t in data.RAGTRUTH_TASKS if t in inp.done]
    if not tasks:
        raise ValueError("localisation needs at least one extracted RAGTruth task")
    split = {s: [(t, store.example(ex, view)) for t in tasks for ex in inp.datasets[t].split(s).examples]
             for s in ("train", "validation", "test")}  # fmt: skip
    return split, tasks


def _localisation_cv(n_boot: int):
    """Per-task token probes with every choice by 5-fold CV over train + validation (`suite.task_cv_run`)."""
    from halluprobe.evaluation import _suite as suite

    view = "mean+hidden" if "mean+hidden" in _INPUTS[0].token_views else "mean"
    split, tasks = _token_split(view)
    return suite.task_cv_run(split, tasks, view=view, n_bootstrap=n_boot)


def _job(spec: tuple):
    """One independent unit of the analysis (in a worker process with few BLAS threads)."""
    from threadpoolctl import threadpool_limits

    kind, arg = spec
    fn = {"fit": _fit, "pooled": _pooled, "loc": _localisation, "loccv": _localisation_cv}[kind]
    cpus = os.cpu_count() or 1
    long = kind in ("loc", "loccv")  # the longest jobs
    threads = _INPUTS[0].threads if not long else max(_INPUTS[0].threads, cpus // 2)
    with threadpool_limits(threads):
        return _guarded(f"{kind} {arg}", lambda: fn(arg), None if kind != "pooled" else [])


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


def _inputs(
    data_dir: Path, work: Path, n_boot: int, n_paired: int, n_jobs: int, token_views: tuple
) -> Inputs:
    from halluprobe import FeatureCache, rank_heads

    ext = json.loads((work / "extract.json").read_text())
    settings = json.loads((work / "settings.json").read_text())  # written by the extract phase
    judge_path = work / "judge.json"
    return Inputs(
        datasets=data.load(data_dir), cache=FeatureCache(work / "cache", settings),
        order=rank_heads(np.asarray(ext["induction"]), tuple(ext["layers"])),
        judge=json.loads(judge_path.read_text()) if judge_path.exists() else None, extract=ext, work=work,
        done=frozenset(ext.get("complete", data.ALL)), n_boot=n_boot, n_paired=n_paired,
        threads=max(1, (os.cpu_count() or 1) // n_jobs), token_views=tuple(token_views),
    )  # fmt: skip


def analyze(
    data_dir: Path, work: Path, out: Path, n_boot: int = 10_000, n_paired: int = 100_000,
    token_views: tuple = ("mean+hidden",),
) -> None:  # fmt: skip
    """The whole analysis into ``out``, written after the fits, the transfer and the localisation.

    ``token_views``: the feature views (`VIEW_NAMES` of the evaluation suite) given a token probe beside the
    head-mean ones.
    """
    from halluprobe.evaluation import _suite as suite, write_outputs

    ext = json.loads((Path(work) / "extract.json").read_text())
    done = set(ext.get("complete", data.ALL))
    names = [n for n in data.MAIN if n in done]
    jobs = [("fit", n) for n in names]
    if all(t in done for t in data.RAGTRUTH_TASKS):
        jobs.append(("pooled", max(1000, n_boot // 5)))
    if any(t in done for t in data.RAGTRUTH_TASKS):
        jobs.append(("loc", max(200, n_boot // 50)))
        jobs.append(("loccv", max(200, n_boot // 50)))
    _INPUTS[:] = [_inputs(Path(data_dir), Path(work), n_boot, n_paired, len(jobs), token_views)]
    inp = _INPUTS[0]
    cost_path = Path(work) / "cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.exists() else None
    cpus = os.cpu_count() or 1
    pool = get_context("fork").Pool(min(len(jobs), cpus)) if cpus > 1 and len(jobs) > 1 else None
    try:  # the localisation runs longest: the tables are written before it ends, and again after
        pending = {j: pool.apply_async(_job, (j,)) for j in jobs} if pool else {}
        got = {j: pending[j].get() if pool else _job(j) for j in jobs if j[0] not in ("loc", "loccv")}
        runs = {n: got["fit", n] for n in names if got["fit", n] is not None}
        pooled = next((v for (k, _), v in got.items() if k == "pooled"), [])
        print("analyze: fitted", ", ".join(runs), flush=True)
        tests = _guarded(
            "tests", lambda: suite.grouped_tests([t for r in runs.values() for t in r.tests]), ()
        )
        write_outputs(out, runs, tests, pooled, None, cost, inp.extract, inp.judge, proxy=PROXY)

        def cross_task():
            return suite.cross_task(
                runs, inp.datasets, inp.cache.load, data.RAGTRUTH_TASKS, max(1000, n_boot // 5)
            )

        transfers = _guarded("cross-task", cross_task, []) + pooled
        write_outputs(out, runs, tests, transfers, None, cost, inp.extract, inp.judge, proxy=PROXY)
        loc_jobs = [j for j in jobs if j[0] in ("loc", "loccv")]
        if loc_jobs:
            loc, cv = (pending[j].get() if pool else _job(j) for j in loc_jobs)
            if loc is not None and cv is not None:  # the cross-validated scorer's rows after the others
                loc = {**loc, "fit": {**loc["fit"], **cv["fit"]}, "results": loc["results"] + cv["results"]}
            write_outputs(out, runs, tests, transfers, loc, cost, inp.extract, inp.judge, proxy=PROXY)
    finally:
        if pool is not None:
            pool.terminate()
