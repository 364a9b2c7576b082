"""The general detector: equal weight per source, leave-one-source-out choice, calibration, determinism."""

import hashlib

import numpy as np
import pytest
from halluprobe import Detector, fill_grounding, fit_general, train_general
from halluprobe.training import _general as gen
from halubench_data import Dataset, Example

SETS = ("GL9", "GA7L9", "GH64")
# the sources are small on purpose (fewer than 10 validation answers of a class warn, as tested below)
pytestmark = pytest.mark.filterwarnings("ignore::halluprobe.training._calibration.DegenerateFitWarning")
WORDS = "amber basil cedar delta ember fjord grove heron iris juniper kelp lotus maple nectar onyx".split()


def _source(name: str, rng, sizes=(20, 12, 4), noise=0.3) -> Dataset:
    """A source whose hallucinated answers (label 1) bring words the context lacks, with label noise."""
    exs = []
    for split, n in zip(("train", "validation", "test"), sizes, strict=True):
        for i in range(n):
            ctx = rng.choice(WORDS[:8], 6, replace=False)
            y = i % 2
            answer = list(rng.choice(ctx, 3))
            if y != (rng.random() < noise):  # hallucinated-looking answer, sometimes on a label-0 example
                answer[1] = str(rng.choice(WORDS[8:]))
            exs.append(
                Example(
                    f"{name}-{split}-{i}",
                    name,
                    " ".join(ctx),
                    "Which?",
                    " ".join(answer),
                    y,
                    f"{name}-g{i // 2}",
                    split,
                )  # fmt: skip
            )
    return Dataset(tuple(exs), name=name)


def _records(ds: Dataset, record_factory, rng) -> dict:
    return {
        split: fill_grounding(
            [record_factory(ex.id, rng) for ex in ds.split(split).examples], ds.split(split).examples
        )
        for split in ("train", "validation", "test")
    }


@pytest.fixture
def sources(record_factory):
    rng = np.random.default_rng(0)
    datasets = [_source(name, rng) for name in ("qa", "summary", "data2txt")]
    return datasets, {ds.name: _records(ds, record_factory, rng) for ds in datasets}


def _fit(sources, **kw):
    datasets, records = sources
    return fit_general(
        datasets, records, head_order=list(range(8)), hidden_layers=(1,), feature_sets=SETS, **kw
    )


def test_source_weights_give_every_source_and_label_the_same_total():
    y = np.array([0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1])
    src = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    w = gen.source_label_weights(y, src)
    assert w.sum() == pytest.approx(len(y))
    for s in (0, 1):
        assert w[src == s].sum() == pytest.approx(len(y) / 2)
        assert w[(src == s) & (y == 1)].sum() == pytest.approx(w[(src == s) & (y == 0)].sum())


def test_leave_one_source_out_never_fits_on_the_held_out_source(sources, monkeypatch):
    seen = []
    real = gen.fit_weighted

    def spy(fs, heads, k, tr, va, **kw):
        seen.append((fs, set(tr.source.tolist()), set(va.source.tolist())))
        groups.append(set(tr.groups) | set(va.groups))
        return real(fs, heads, k, tr, va, **kw)

    groups = []

    monkeypatch.setattr(gen, "fit_weighted", spy)
    result = _fit(sources)
    names = result.sources
    assert names == ["qa", "summary", "data2txt"]
    for held in range(3):  # every candidate once per held-out source, fitted and tuned on the others only
        fold = [fs for fs, tr, va in seen if tr == va == set(range(3)) - {held}]
        assert sorted(fold) == sorted(SETS)
    assert seen[-1] == (result.feature_set, {0, 1, 2}, {0, 1, 2})  # the final fit: every source
    assert len(seen) == 3 * len(SETS) + 1
    means = result.mean_loso_auroc()
    assert set(result.loso_auroc) == set(SETS) and all(
        set(v) == set(names) for v in result.loso_auroc.values()
    )
    assert result.feature_set == max(SETS, key=lambda fs: (means[fs], -SETS.index(fs)))
    assert result.detector.probe_.selection["loso_auroc"] == pytest.approx(means[result.feature_set])


def test_calibration_matches_the_weighted_base_rate_and_the_threshold_is_chosen(sources):
    datasets, records = sources
    result = _fit(sources)
    fit = result.detector.probe_
    val = [r for ds in datasets for r in records[ds.name]["validation"]]
    y = np.concatenate([ds.validation.labels for ds in datasets])
    src = np.repeat(np.arange(3), [len(ds.validation) for ds in datasets])
    p = fit.predict_proba(val)[:, 1]
    w = np.array([len(y) / (3 * (src == s).sum()) for s in src])
    # Platt scaling with an intercept: the weighted mean probability equals the weighted label rate
    assert np.average(p, weights=w) == pytest.approx(np.average(y, weights=w), abs=1e-3)
    from halluprobe.training._calibration import transfer_threshold

    by = {s: src == s for s in range(3)}
    probs, labels = {s: p[m] for s, m in by.items()}, {s: y[m] for s, m in by.items()}
    # the default rule: at most 20 % of each source's supported answers flagged, on average
    assert fit.threshold == transfer_threshold(probs, labels, "false-alarm@0.2")
    assert np.mean([np.mean(probs[s][labels[s] == 0] >= fit.threshold) for s in by]) <= 0.2
    assert fit.selection["threshold_false_alarm_rate"] == 0.2
    a, b = result.calibration
    assert (fit.selection["calibration_slope"], fit.selection["calibration_intercept"]) == (a, b)


def test_the_threshold_rule_is_an_option(sources):
    from halluprobe.training._calibration import transfer_threshold

    datasets, records = sources
    result = _fit(sources, threshold_rule="mean-f1")
    fit = result.detector.probe_
    val = [r for ds in datasets for r in records[ds.name]["validation"]]
    y = np.concatenate([ds.validation.labels for ds in datasets])
    src = np.repeat(np.arange(3), [len(ds.validation) for ds in datasets])
    p = fit.predict_proba(val)[:, 1]
    by = {s: src == s for s in range(3)}
    probs, labels = {s: p[m] for s, m in by.items()}, {s: y[m] for s, m in by.items()}
    assert fit.threshold == transfer_threshold(probs, labels, "mean-f1")  # the best mean F1
    assert "threshold_false_alarm_rate" not in fit.selection
    with pytest.raises(ValueError, match="threshold rule must be one of"):
        _fit(sources, threshold_rule="false-alarm@2")


def test_rethreshold_equals_fitting_with_that_rule(sources, tmp_path):
    from halluprobe.training._rethreshold import rethreshold

    datasets, records = sources
    plain = _fit(sources, threshold_rule="mean-f1").detector
    val = [r for ds in datasets for r in records[ds.name]["validation"]]
    y = np.concatenate([ds.validation.labels for ds in datasets])
    src = np.repeat([ds.name for ds in datasets], [len(ds.validation) for ds in datasets])
    p = plain.probe_.predict_proba(val)[:, 1]
    probs = {s: p[src == s] for s in set(src)}
    labels = {s: y[src == s] for s in set(src)}
    before = plain.probe_.threshold
    moved = rethreshold(plain, probs, labels, "false-alarm@0.2")
    assert plain.probe_.threshold == before and "threshold_false_alarm_rate" not in plain.probe_.selection
    # the same detector, byte for byte, as a fit that chose its threshold by that rule
    direct = _fit(sources).detector  # the default rule
    a, b = moved.save(tmp_path / "moved"), direct.save(tmp_path / "direct")
    for name in ("detector.json", "detector.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    back = rethreshold(Detector.load(a), probs, labels, "mean-f1")
    assert back.probe_.threshold == before and "threshold_false_alarm_rate" not in back.probe_.selection
    with pytest.raises(ValueError, match="one label per probability"):
        rethreshold(plain, probs, {s: labels[s][:-1] for s in labels}, "mean-f1")
    with pytest.raises(ValueError, match="threshold rule must be one of"):
        rethreshold(plain, probs, labels, "f1")
    with pytest.raises(ValueError, match="fitted detector"):
        rethreshold(Detector(), probs, labels, "mean-f1")


def test_training_twice_gives_byte_identical_detectors(sources, tmp_path):
    datasets, records = sources
    copies = {n: {s: list(r) for s, r in per.items()} for n, per in records.items()}
    digests = []
    for i, recs in enumerate((records, copies)):
        det = train_general(datasets, recs, head_order=list(range(8)), hidden_layers=(1,), feature_sets=SETS)
        folder = det.save(tmp_path / f"d{i}")
        digests.append(
            [
                hashlib.sha256((folder / f).read_bytes()).hexdigest()
                for f in ("detector.json", "detector.safetensors")
            ]
        )
    assert digests[0] == digests[1]
    loaded = Detector.load(tmp_path / "d0")
    test_recs = records["qa"]["test"]
    np.testing.assert_array_equal(loaded.score_records(test_recs), det.score_records(test_recs))


def test_bad_sources_are_refused(sources):
    datasets, records = sources
    with pytest.raises(ValueError, match=r"at least two sources \(Example.source\), got \['qa'\]"):
        fit_general(datasets[:1], records, head_order=[0])
    with pytest.raises(ValueError, match="datasets need distinct names"):
        fit_general([datasets[0], datasets[0]], records, head_order=[0])
    with pytest.raises(ValueError, match="no records for dataset 'summary'"):
        fit_general(datasets[:2], {"qa": records["qa"]}, head_order=[0])
    swapped = {**records, "qa": {**records["qa"], "train": records["qa"]["train"][::-1]}}
    with pytest.raises(ValueError, match="records of 'qa' train do not match its examples"):
        fit_general(datasets, swapped, head_order=list(range(8)), feature_sets=("GL9",))
    with pytest.raises(ValueError, match="not a concatenation"):
        fit_general(datasets, records, head_order=[0], feature_sets=("GX",))


def test_a_source_with_few_answers_of_a_label_warns(sources):
    from halluprobe.training._calibration import DegenerateFitWarning

    with pytest.warns(
        DegenerateFitWarning, match="general detector, source 'qa': the validation split has fewer"
    ):
        _fit(sources)


def test_sources_are_the_examples_sources_and_shared_groups_stay_out(record_factory, monkeypatch):
    """One dataset of two sources (as RAGTruth's tasks) is two sources; a group shared with the held-out
    source never enters its fit."""
    from dataclasses import replace

    rng = np.random.default_rng(4)
    a, b = _source("a", rng), _source("b", rng)
    shared = a.examples[0].group  # the first group of source a also holds answers of source b
    b_exs = [replace(ex, group=shared) if i < 4 else ex for i, ex in enumerate(b.examples)]
    both = Dataset(tuple(a.examples) + tuple(b_exs), name="ab")
    c = _source("c", rng)
    datasets = [both, c]
    records = {ds.name: _records(ds, record_factory, rng) for ds in datasets}
    folds = []
    real = gen.fit_weighted

    def spy(fs, heads, k, tr, va, **kw):
        folds.append((set(tr.source.tolist()) | set(va.source.tolist()), set(tr.groups) | set(va.groups)))
        return real(fs, heads, k, tr, va, **kw)

    monkeypatch.setattr(gen, "fit_weighted", spy)
    result = fit_general(
        datasets, records, head_order=list(range(8)), hidden_layers=(1,), feature_sets=("GL9",)
    )
    assert result.sources == ["a", "b", "c"] and set(result.loso_auroc["GL9"]) == {"a", "b", "c"}
    held_a, held_b = folds[0], folds[1]
    assert held_a[0] == {1, 2} and f"0/{shared}" not in held_a[1]  # b's answers in a's group stay out
    assert held_b[0] == {0, 2} and f"0/{shared}" not in held_b[1]
    assert f"0/{shared}" in folds[2][1]  # holding out c: the shared group is fitted on


def test_an_anchored_candidate_is_one_probe_equal_to_its_mix(sources):
    from halluprobe.training import _anchor

    datasets, records = sources
    tr = [r for ds in datasets for r in records[ds.name]["train"]]
    y = np.concatenate([ds.train.labels for ds in datasets])
    src = np.repeat(np.arange(3), [len(ds.train) for ds in datasets])
    test = [r for ds in datasets for r in records[ds.name]["test"]]
    pool = gen._Pool(tr, y, [str(i) for i in range(len(tr))], src)
    probe = gen.fit_weighted("L9", [0], 1, pool, pool)
    mixed = _anchor.anchored_scores(probe, tr, test, (0.3,))[0.3]
    folded = _anchor.anchor(probe, tr, y, 0.3)
    assert folded.feature_set == "GL9" and folded.selection["overlap_weight"] == pytest.approx(0.7)
    np.testing.assert_allclose(folded.decision_function(test), mixed, rtol=1e-9, atol=1e-9)
    overlap = np.array([r.grounding[0] for r in test])
    only_floor = _anchor.anchor(probe, tr, y, 0.0).decision_function(test)  # w = 0: the floor, z-scored
    np.testing.assert_allclose(np.argsort(only_floor, kind="stable"), np.argsort(overlap, kind="stable"))
    with pytest.raises(ValueError, match="brings G itself"):
        _anchor.parse_candidate("O+GL9")
    with pytest.raises(ValueError, match="not a concatenation"):
        _anchor.parse_candidate("O+X9")


def test_anchored_candidates_are_chosen_with_their_weight_and_saved(sources, tmp_path):
    from halluprobe.training._anchor import ANCHOR_WEIGHTS

    result = fit_general(
        *sources, head_order=list(range(8)), hidden_layers=(1,), feature_sets=("O+L9", "GL9")
    )
    assert set(result.loso_auroc) == {"GL9"} | {f"O+L9@{w:g}" for w in ANCHOR_WEIGHTS}
    means = result.mean_loso_auroc()
    assert result.candidate == max(means, key=lambda c: (means[c], -list(means).index(c)))
    det = result.detector
    if result.candidate.startswith("O+"):
        w = float(result.candidate.split("@")[1])
        assert result.feature_set == "GL9" and det.probe_.selection["probe_weight"] == pytest.approx(w)
    loaded = Detector.load(det.save(tmp_path / "d"))
    recs = sources[1]["qa"]["test"]
    np.testing.assert_array_equal(loaded.score_records(recs), det.score_records(recs))


def test_parallel_leave_one_source_out_gives_the_same_detector(sources):
    one = fit_general(*sources, head_order=list(range(8)), hidden_layers=(1,), feature_sets=("O+L9", "GL9"))
    two = fit_general(
        *sources, head_order=list(range(8)), hidden_layers=(1,), feature_sets=("O+L9", "GL9"), jobs=2
    )
    assert one.loso_auroc == two.loso_auroc and one.candidate == two.candidate
    np.testing.assert_array_equal(one.detector.probe_.coef, two.detector.probe_.coef)
    with pytest.raises(ValueError, match="jobs must be an int >= 1"):
        fit_general(*sources, head_order=list(range(8)), hidden_layers=(1,), feature_sets=("GL9",), jobs=0)


def test_the_cli_help_names_the_default_candidates():
    from halluprobe.cli._parser import build_parser
    from halluprobe.training._general import GENERAL_FEATURE_SETS

    train = next(
        a for a in build_parser()._subparsers._group_actions[0].choices.values() if a.prog.endswith("train")
    )
    text = "".join(train.format_help().split())  # argparse wraps the list after its commas
    assert ",".join(GENERAL_FEATURE_SETS) in text
