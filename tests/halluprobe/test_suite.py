"""halluprobe.evaluation: every method on several datasets, typed results, the tables."""

import dataclasses
import json

import numpy as np
import pytest
from flashstats_hf import LOGIT_STAT_NAMES
from halluprobe.evaluation import MethodScores, PairedTest, _suite as suite, _tables as tables
from halubench_data import Dataset, build_default, concat

SETS = ("A7", "L9", "A7L9")


# tiny synthetic fits: the degenerate-fit warning is expected and tested elsewhere
pytestmark = pytest.mark.filterwarnings("ignore::halluprobe.training._calibration.DegenerateFitWarning")


def _renamed(ds, prefix: str, name: str) -> Dataset:
    return Dataset(tuple(dataclasses.replace(e, id=prefix + e.id, group=prefix + e.group) for e in ds), name)


def _store(datasets, make_record, seed=0):
    """``load(ids) -> records`` over every example of ``datasets``; one informative head statistic."""
    rng = np.random.default_rng(seed)
    recs = {}
    for ds in datasets:
        for ex in ds:
            r = make_record(ex.id, rng, nl=2, h=4, v=len(LOGIT_STAT_NAMES))
            r.head_stats[0, 0, 0, 0] += 2.0 * ex.label
            recs[ex.id] = r
    return lambda ids: [recs[i] for i in ids]


@pytest.fixture(scope="module")
def two_tasks():
    a = _renamed(build_default(n_contexts=12), "a/", "task_a")
    b = _renamed(build_default(seed=7, n_contexts=12), "b/", "task_b")
    return a, b


def _judge(ds, seed=3):
    rng = np.random.default_rng(seed)
    val, test = (rng.random(len(ds.split(s))) for s in ("validation", "test"))
    return MethodScores.chosen_on_validation("judge", "judge", val, test, np.asarray(ds.validation.labels))


def test_evaluate_dataset_scores_every_method_in_order(two_tasks, record_factory):
    ds = two_tasks[0]
    load = _store([ds], record_factory)
    recs = suite.split_records(load, ds)
    run = suite.evaluate_dataset(ds, recs, list(range(8)), LOGIT_STAT_NAMES, extra=[_judge(ds)],
                                 feature_sets=SETS, n_bootstrap=50, n_paired=0)  # fmt: skip
    names = list(run.evaluation.methods)
    assert names[:3] == list(SETS) and names[-3:] == ["judge", "text-only length", "text-only TF-IDF"]
    kinds = [run.evaluation.methods[n].kind for n in names]
    assert set(kinds[3:-3]) == {"detector"} and {"LookbackLens", "RAUQ"} <= set(names)
    np.testing.assert_array_equal(run.evaluation.y_test, ds.test.labels)
    fit = run.fits["A7L9"]
    np.testing.assert_array_equal(run.evaluation.methods["A7L9"].test, fit.predict_proba(recs["test"])[:, 1])
    assert run.best_probe in SETS and run.selection["A7"]["K"] >= 1 and run.tests == ()
    assert run.evaluation.results["A7"].auroc > 0.8  # the informative statistic is in A7's heads


def test_dataset_tests_families_and_grouped_holm(two_tasks, record_factory):
    ds = two_tasks[0]
    recs = suite.split_records(_store([ds], record_factory), ds)
    run = suite.evaluate_dataset(ds, recs, list(range(8)), LOGIT_STAT_NAMES, extra=[_judge(ds)],
                                 feature_sets=SETS, n_bootstrap=20, n_paired=0)  # fmt: skip
    tests = suite.dataset_tests(run, n=200, text_only_on=ds.name)
    fams = [t.family for t in tests]
    assert fams.count("additions") == 2  # only L9 -> A7L9 is among the fitted sets, F1 and AUROC
    assert {(t.a, t.b) for t in tests if t.family == "probe_vs_judge"} <= {
        ("judge", "A64H64"),
        ("judge", run.best_probe),
    }
    assert fams.count("vs_text_only") == 2 * sum(
        m.kind in ("probe", "detector") for m in run.evaluation.methods.values()
    )
    mixed = [tests[-1], tests[0], tests[2], tests[1]]
    grouped = suite.grouped_tests(mixed)
    order = [f for f, _ in tables.TEST_FAMILIES]
    assert [order.index(t.family) for t in grouped] == sorted(order.index(t.family) for t in grouped)
    assert all(t.p_holm is not None and t.p_holm >= t.p for t in grouped)


def test_grouped_tests_holm_within_each_key():
    t = [PairedTest("additions", k, d, "x", "y", "f1", 0.1, (0.0, 0.2), p)
         for k, d, p in (("k1", "d1", 0.01), ("k2", "d1", 0.04), ("k1", "d2", 0.03))]  # fmt: skip
    got = suite.grouped_tests(t)
    assert [(g.key, g.dataset) for g in got] == [("k1", "d1"), ("k1", "d2"), ("k2", "d1")]
    assert [g.p_holm for g in got] == pytest.approx([0.02, 0.03, 0.04])


def test_cross_task_and_pooled_transfer(two_tasks, record_factory):
    a, b = two_tasks
    load = _store([a, b], record_factory)
    runs = {
        d.name: suite.evaluate_dataset(d, suite.split_records(load, d), list(range(8)), LOGIT_STAT_NAMES,
                                       feature_sets=SETS, n_bootstrap=20, n_paired=0)
        for d in (a, b)
    }  # fmt: skip
    datasets = {"task_a": a, "task_b": b}
    rows = suite.cross_task(runs, datasets, load, ["task_a", "task_b"], n_bootstrap=20, feature_sets=SETS)
    assert len(rows) == 2 * 2 * 3 and {(r.fit, r.test) for r in rows} == {
        (f, t) for f in datasets for t in datasets
    }
    diag = next(r for r in rows if r.fit == r.test == "task_a" and r.method == "A7")
    assert diag.result.auroc == pytest.approx(runs["task_a"].evaluation.results["A7"].auroc)
    pooled = concat([a, b], "pooled")
    target = _renamed(build_default(seed=9, n_contexts=12), "c/", "target")
    load = _store([a, b, target], record_factory)
    judge = {"name": "judge", "validation": np.random.default_rng(0).random(len(pooled.validation)),
             "scores": {"target": np.random.default_rng(1).random(len(target))}}  # fmt: skip
    rows = suite.pooled_transfer(pooled, {"target": target}, load, list(range(8)), LOGIT_STAT_NAMES,
                                 judge=judge, n_bootstrap=20, feature_sets=("A7",))  # fmt: skip
    tests = [(r.test, r.method) for r in rows]
    assert ("pooled", "A7") in tests and ("target", "A7") in tests and ("target", "judge") in tests
    assert ("target", "LookbackLens") in tests and all(r.fit == "pooled" for r in rows)
    assert next(r for r in rows if r.test == "target" and r.method == "A7").result.n == len(target)


def _tokens(rng, n, task):
    from halluprobe.features import TokenExample

    out = []
    for i in range(n):
        flags = rng.random(8) < 0.3
        feats = np.stack([flags * 2.0 + rng.normal(size=8), rng.normal(size=8)], 1).astype(np.float32)
        out.append((task, TokenExample(feats, np.stack([np.arange(8) * 2, np.arange(8) * 2 + 2], 1),
                                       np.repeat(flags, 2), f"{task}{i}")))  # fmt: skip
    return out


def test_localisation_runs_and_tables(tmp_path, two_tasks, record_factory):
    rng = np.random.default_rng(5)
    split = {s: _tokens(rng, n, "a") + _tokens(rng, n, "b") for s, n in (("train", 40), ("validation", 20),
                                                                         ("test", 20))}  # fmt: skip
    loc = suite.localisation_runs(split, 1, ["a", "b"], n_bootstrap=20)
    per_task = suite.TASK_NAMES["mean"]
    assert list(loc["fit"]) == [suite.PLAIN_NAME, suite.CONTEXT_NAME, per_task]
    assert loc["fit"][suite.PLAIN_NAME]["window"] == 0 and loc["fit"][suite.PLAIN_NAME]["smooth"] == 0
    assert sorted(loc["fit"][per_task]["tasks"]) == ["a", "b"]
    assert [(r["method"], r["task"]) for r in loc["results"]][:3] == [
        (suite.PLAIN_NAME, t) for t in ("all", "a", "b")
    ]
    assert len(loc["results"]) == 12 and loc["results"][0]["token_auroc"] > 0.8
    # the report writer: every file, and the CSV reads back to the same numbers
    ds = two_tasks[0]
    recs = suite.split_records(_store([ds], record_factory), ds)
    run = suite.evaluate_dataset(ds, recs, list(range(8)), LOGIT_STAT_NAMES, feature_sets=SETS,
                                 n_bootstrap=20, n_paired=100)  # fmt: skip
    extract = {"device": "cpu", "dtype": "fp32", "backend": "torch", "examples_computed": 3,
               "seconds_per_example": 0.5, "batch_size": 2}  # fmt: skip
    judge = {"template": "plain", "mean_auroc": 0.55, "aurocs": {"plain": {"task_a": 0.55}}}
    tests = suite.grouped_tests(run.tests)
    tables.write_outputs(tmp_path, {ds.name: run}, tests, [], loc, None, extract, judge, proxy="tiny")
    for f in ("main.csv", "tests.csv", "localisation.csv", "selection.json", "cost.json", "report.md",
              "main_table.md", "detection_roc.png", "detection_auroc_bars.png"):  # fmt: skip
        assert (tmp_path / f).stat().st_size > 0, f
    rows = tables.read_csv(tmp_path / "main.csv")
    assert [r["method"] for r in rows] == list(run.evaluation.methods)
    res = run.evaluation.results["A7"]
    a7 = next(r for r in rows if r["method"] == "A7")
    assert (a7["auroc"], a7["f1_lo"], a7["n_groups"], a7["proxy"]) == (
        res.auroc,
        res.f1_ci[0],
        res.n_groups,
        "tiny",
    )
    report = (tmp_path / "report.md").read_text()
    assert tables.main_markdown(rows) in report and "Chosen on validation" in report
    assert f"- {per_task}: features mean, a: C = " in report
    assert (
        json.loads((tmp_path / "selection.json").read_text())["task_a"]["best_probe_by_validation"]
        == run.best_probe
    )
    delta = tables.compare_markdown(rows[:2], rows[1:3])
    assert "(gone)" in delta and "(new)" in delta and "(+0.000)" in delta


def test_results_page_renders_a_written_folder(tmp_path, two_tasks, record_factory):
    from halluprobe.evaluation._results_page import render

    with pytest.raises(FileNotFoundError, match=r"main\.csv"):
        render(tmp_path)
    ds = two_tasks[0]
    recs = suite.split_records(_store([ds], record_factory), ds)
    run = suite.evaluate_dataset(ds, recs, list(range(8)), LOGIT_STAT_NAMES, feature_sets=SETS,
                                 n_bootstrap=20, n_paired=100)  # fmt: skip
    rng = np.random.default_rng(6)
    split = {s: _tokens(rng, n, "a") for s, n in (("train", 30), ("validation", 15), ("test", 15))}
    loc = suite.localisation_runs(split, 1, ["a"], n_bootstrap=10)
    extract = {"device": "cpu", "examples_computed": 3, "seconds_per_example": 0.5, "batch_size": 2}
    tests = suite.grouped_tests(run.tests)
    tables.write_outputs(tmp_path, {ds.name: run}, tests, [], loc, None, extract, None, proxy="tiny")
    page = render(tmp_path)
    rows = tables.read_csv(tmp_path / "main.csv")
    assert tables.main_markdown(rows) in page and "## Paired tests" in page
    best = max(rows, key=lambda r: r["auroc"])
    assert f"task_a {best['method']} {best['auroc']:.3f}" in page
    plain = next(r for r in loc["results"] if r["method"] == suite.PLAIN_NAME and r["task"] == "all")
    verdict = "met" if plain["token_auroc"] >= 0.82 else "missed"
    mark = " (chosen by validation span F1)" if loc["chosen"] == suite.PLAIN_NAME else ""
    assert f"| {suite.PLAIN_NAME}{mark} | {plain['token_auroc']:.3f} ({verdict}) |" in page
    assert "window 0, smoothing 0, gap 0" in page and "0.589" in page


@pytest.mark.slow  # test_localisation_runs_and_tables runs the localisation suite by default
def test_localisation_runs_fit_each_view_and_choose_by_validation_span_f1():
    from halluprobe.features import TokenExample

    rng = np.random.default_rng(7)
    split = {s: _tokens(rng, n, "a") for s, n in (("train", 40), ("validation", 20), ("test", 20))}

    def sharper(items):  # the same answers with one more, almost noiseless column (a "hidden state")
        out = []
        for t, e in items:
            extra = e.labels[:, None] * 3.0 + rng.normal(0, 0.1, (len(e.labels), 1))
            feats = np.concatenate([extra, e.features], 1).astype(np.float32)
            out.append((t, TokenExample(feats, e.offsets, e.gold, e.group)))
        return out

    views = {"mean+hidden": {s: sharper(v) for s, v in split.items()}}
    loc = suite.localisation_runs(split, 1, ["a"], n_bootstrap=10, views=views)
    name = suite.VIEW_NAMES["mean+hidden"]
    assert list(loc["fit"]) == [suite.PLAIN_NAME, suite.CONTEXT_NAME, name]
    assert loc["fit"][name]["view"] == "mean+hidden" and loc["fit"][suite.PLAIN_NAME]["view"] == "mean"
    assert loc["chosen"] == name and loc["fit"][name]["chosen"]
    assert not loc["fit"][suite.PLAIN_NAME]["chosen"]
    f1 = {n: f["val_span_f1"] for n, f in loc["fit"].items()}
    assert f1[name] == max(f1.values()) and f1[name] > f1[suite.PLAIN_NAME]
    rows = {(r["method"], r["task"]): r for r in loc["results"]}
    assert rows[name, "all"]["span_f1"] > rows[suite.PLAIN_NAME, "all"]["span_f1"]
    assert len(loc["results"]) == 8  # 4 scorers x (all, a)
    with pytest.raises(ValueError, match="unknown token view 'hidden'"):
        suite.localisation_runs(split, 1, ["a"], n_bootstrap=2, views={"hidden": views["mean+hidden"]})
    short = {s: v[:-1] for s, v in views["mean+hidden"].items()}
    with pytest.raises(ValueError, match="must hold the same examples"):
        suite.localisation_runs(split, 1, ["a"], n_bootstrap=2, views={"heads": short})


def _opposite_tasks(rng) -> dict:
    """Splits of two tasks whose token signal has opposite signs (task "b": the signal column negated)."""
    from halluprobe.features import TokenExample

    def flipped(items):
        return [(t, TokenExample(e.features * np.array([-1.0, 1.0], np.float32), e.offsets, e.gold, e.group))
                for t, e in items]  # fmt: skip

    return {s: _tokens(rng, n, "a") + flipped(_tokens(rng, n, "b"))
            for s, n in (("train", 40), ("validation", 20), ("test", 20))}  # fmt: skip


@pytest.mark.slow  # test_localisation_runs_and_tables runs the localisation suite by default
def test_per_task_token_probes_score_each_answer_with_its_tasks_probe():
    """Two tasks whose token signal has opposite signs: one pooled probe cannot read both; per task can."""
    from halluprobe.localisation import evaluate_spans

    split = _opposite_tasks(np.random.default_rng(8))
    loc = suite.localisation_runs(split, 1, ["a", "b"], n_bootstrap=10)
    name = suite.TASK_NAMES["mean"]
    assert loc["chosen"] == name
    rows = {(r["method"], r["task"]): r for r in loc["results"]}
    assert rows[name, "all"]["span_f1"] > rows[suite.CONTEXT_NAME, "all"]["span_f1"] + 0.2
    assert rows[name, "all"]["token_auroc"] > 0.8 and rows[name, "all"]["threshold"] == 0.0
    # the scorer is each task's own probe: refit task b alone and score its test answers the same way
    probes = suite._task_probes(split, ["a", "b"], "mean", 100_000)
    assert probes.probes["b"].coef[0] < 0 < probes.probes["a"].coef[0]
    test_b = [e for t, e in split["test"] if t == "b"]
    pb = probes.probes["b"]
    alone = evaluate_spans(test_b, [pb.decision_function(e.features) for e in test_b], pb.threshold,
                           n_bootstrap=10, gap=pb.gap)  # fmt: skip
    assert rows[name, "b"]["span_f1"] == pytest.approx(alone.span_f1)
    with pytest.raises(ValueError, match="no token probe for task 'c'"):
        probes.scores("c", test_b[0].features)


@pytest.mark.slow  # test_localisation_runs_and_tables runs the localisation suite by default
def test_cross_validated_task_probes_fit_on_train_and_validation_and_score_test_once():
    from halluprobe.features import TokenExample

    split = _opposite_tasks(np.random.default_rng(9))
    run = suite.task_cv_run(split, ["a", "b"], view="mean", folds=4, n_bootstrap=10, cs=(0.01, 1.0))
    ((name, fit),) = run["fit"].items()
    assert fit["folds"] == 4 and set(fit["tasks"]) == {"a", "b"}
    rows = {(r["method"], r["task"]): r for r in run["results"]}
    assert set(rows) == {(name, "all"), (name, "a"), (name, "b")}
    assert rows[name, "all"]["token_auroc"] > 0.8 and rows[name, "all"]["span_f1"] > 0.5
    assert rows[name, "a"]["n_answers"] == 20 and rows[name, "all"]["n_answers"] == 40
    # test labels play no part in any choice: relabelled test answers leave the fit unchanged
    blank = [(t, TokenExample(e.features, e.offsets, np.zeros_like(e.gold), e.group))
             for t, e in split["test"]]  # fmt: skip
    again = suite.task_cv_run({**split, "test": blank}, ["a", "b"], view="mean", folds=4, n_bootstrap=10,
                              cs=(0.01, 1.0))  # fmt: skip
    assert again["fit"] == run["fit"]
    # but validation answers are training data here: relabelling them changes the probes
    val_blank = [(t, TokenExample(e.features, e.offsets, np.zeros_like(e.gold), e.group))
                 for t, e in split["validation"]]  # fmt: skip
    moved = suite.task_cv_run({**split, "validation": val_blank}, ["a", "b"], view="mean", folds=4,
                              n_bootstrap=10, cs=(0.01, 1.0))  # fmt: skip
    assert moved["fit"] != run["fit"]


def test_cost_section_says_whether_a_rerun_repeats_the_extraction():
    """Deterministic runs say they repeat; autotuned GPU runs (or ones that predate the key) may not."""
    run = {"examples_computed": 10, "seconds_per_example": 0.1, "batch_size": 4, "device": "NVIDIA H200",
           "dtype": "torch.bfloat16", "backend": "triton", "peak_gpu_bytes": 2**30}  # fmt: skip
    assert "repeats every record bit for bit" in tables.cost_markdown(None, {**run, "deterministic": True})
    for autotuned in ({**run, "deterministic": False}, run):
        text = tables.cost_markdown(None, autotuned)
        assert "were autotuned" in text and "bit for bit" in text
    cpu = {**run, "device": "cpu", "peak_gpu_bytes": None}
    assert "bit for bit" not in tables.cost_markdown(None, cpu)
