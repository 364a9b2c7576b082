"""``run_training`` (the body of ``halluprobe train``) writes results.json beside the report."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from flashstats_hf import LOGIT_STAT_NAMES
from halluprobe import DegenerateFitWarning
from halluprobe.detectors import fit_published
from halluprobe.pipeline import run_training
from halubench_data import build_default


def _records(ds, make_record, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for split in ("train", "validation", "test"):
        recs = []
        for ex in ds.split(split):
            r = make_record(ex.id, rng, nl=2, h=4, v=len(LOGIT_STAT_NAMES))
            r.head_stats[0, 0, 0, 0] += 2.0 * ex.label  # one informative feature
            recs.append(r)
        out[split] = recs
    return out


def test_train_writes_results_json_matching_the_report(tmp_path, record_factory, char_llama):
    ds = build_default(n_contexts=12)
    ext = SimpleNamespace(model=char_llama, layers=None, hidden_layers=(0,))
    with pytest.warns(DegenerateFitWarning, match="fewer than 10 examples"):  # 12 contexts: a tiny fit
        table = run_training(
            ds, _records(ds, record_factory), ext, ["A7", "L9", "A7L9"], tmp_path, proxy=None
        )
    doc = json.loads((tmp_path / "results.json").read_text())
    methods = doc["datasets"]["default"]["methods"]
    assert list(methods)[:3] == ["A7", "L9", "A7L9"]
    assert {"LookbackLens", "RAUQ", "text-only length", "text-only tfidf"} <= set(methods)
    assert {m["kind"] for m in methods.values()} == {"probe", "detector", "text-only", "floor"}
    assert methods["overlap floor"]["kind"] == methods["grounding floor"]["kind"] == "floor"
    best = doc["best_floor"]
    assert best["auroc"] == max(methods[f]["auroc"] for f in ("overlap floor", "grounding floor"))
    assert "Δ floor" in table.splitlines()[0]
    for name, m in methods.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} | {m['f1']:.3f} "))
        assert row.split(" | ")[3] == f"{m['auroc'] - best['auroc']:+.3f}"
    report = (tmp_path / "report.md").read_text()
    assert "## Calibration" in report and (tmp_path / "reliability.png").stat().st_size > 0
    (test,) = doc["paired_tests"]
    assert (test["a"], test["b"], test["metric"], test["p_holm"]) == ("L9", "A7L9", "f1", test["p"])
    assert doc["selection"]["A7L9"]["K"] >= 1 and (tmp_path / "results.md").exists()
    assert "L9 -> A7L9" in (tmp_path / "report.md").read_text()


def test_published_scorers_transfer_to_other_records(record_factory):
    ds = build_default(n_contexts=12)
    recs = _records(ds, record_factory)
    labels = {s: ds.split(s).labels for s in ("train", "validation", "test")}
    scorers = fit_published(recs, labels, list(range(8)), list(LOGIT_STAT_NAMES), toha=False)
    other = _records(ds, record_factory, seed=1)["test"]
    for name, score in scorers.items():
        s = score(other)
        assert s.shape == (len(other),) and np.isfinite(s).all(), name


def _token_split(rng, n):
    from halluprobe.features import TokenExample

    out = []
    for i in range(n):
        flags = rng.random(5) < 0.4
        feats = np.stack([flags * 2.0 + rng.normal(size=5), rng.normal(size=5)], 1).astype(np.float32)
        gold = np.repeat(flags, 3)
        out.append(TokenExample(feats, np.stack([np.arange(5) * 3, np.arange(5) * 3 + 3], 1), gold, f"g{i}"))
    return out


def _train_with_tokens(tmp_path, record_factory, char_llama, seed: int, **token_args) -> tuple[dict, dict]:
    """``run_training`` of L9 on synthetic token examples: (token splits, results.json localisation)."""
    ds = build_default(n_contexts=12)
    ext = SimpleNamespace(model=char_llama, layers=None, hidden_layers=(0,))
    rng = np.random.default_rng(seed)
    tokens = {
        "train": _token_split(rng, 40),
        "validation": _token_split(rng, 20),
        "test": _token_split(rng, 20),
    }
    with pytest.warns(DegenerateFitWarning, match="fewer than 10 examples"):  # 12 contexts: a tiny fit
        run_training(ds, _records(ds, record_factory), ext, ["L9"], tmp_path, proxy=None, published=False,
                     token_examples=tokens, **token_args)  # fmt: skip
    return tokens, json.loads((tmp_path / "results.json").read_text())["localisation"]


def test_train_with_token_examples_saves_the_token_probe(tmp_path, record_factory, char_llama):
    from halluprobe.detectors import Detector

    _, loc = _train_with_tokens(tmp_path, record_factory, char_llama, 3, token_view="heads+hidden")
    assert loc["token_auroc"] > 0.8 and 0 < loc["span_f1"] <= 1 and loc["n_answers"] == 20
    probe = Detector.load(tmp_path / "detectors" / "L9").token_probe_
    assert probe is not None and probe.threshold == loc["threshold"] and probe.C == loc["C"]
    assert probe.view == loc["view"] == "heads+hidden"  # the view travels with the saved probe
    assert loc["cv_folds"] == 0


@pytest.mark.slow  # test_localisation.py covers the CV token probe; the test above trains a token probe
def test_train_with_cross_validated_token_probe(tmp_path, record_factory, char_llama):
    """``token_cv``: the token probe's choices by group CV over train + validation, fitted on both."""
    from halluprobe.detectors import Detector
    from halluprobe.localisation import fit_token_probe_cv

    tokens, loc = _train_with_tokens(tmp_path, record_factory, char_llama, 4, token_view="mean", token_cv=4)
    assert loc["cv_folds"] == 4 and loc["token_auroc"] > 0.8 and loc["n_answers"] == 20
    probe = Detector.load(tmp_path / "detectors" / "L9").token_probe_
    same = fit_token_probe_cv([*tokens["train"], *tokens["validation"]], folds=4, view="mean")
    assert probe.threshold == same.threshold and probe.C == same.C
    np.testing.assert_allclose(probe.coef, same.coef)
