"""The reader's parts and paths: labels from spans, pooling, thresholds, transfer rows, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import FAST, toy_examples  # noqa: TID252 (the fixtures' helpers)

RAGTRUTH = Path(__file__).resolve().parents[4] / "shared" / "data" / "ragtruth"


@pytest.mark.skipif(not (RAGTRUTH / "ragtruth_qa.jsonl").is_file(), reason="needs ../shared/data/ragtruth")
def test_span_labels_land_on_the_tokens_of_real_ragtruth_spans():
    """On real annotated answers and the real SmolLM2 tokenizer: labelled tokens are exactly the spans'."""
    from flashstats_hf.loading import default_gguf_path, dequantized_gguf
    from halluprobe.features._token_data import token_offsets
    from halluprobe.reader import encode_row
    from halubench_data import load
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(dequantized_gguf(default_gguf_path()))
    rows = [e for e in load(f"ragtruth-qa:{RAGTRUTH}") if e.spans][:25]
    assert len(rows) == 25
    for e in rows:
        row = encode_row(tok, e, max_positions=None)
        offsets = token_offsets(tok, e.answer, row.ids[row.start :].tolist())
        inside = np.zeros(len(e.answer), bool)
        for sp in e.spans:
            inside[sp.start : sp.end] = True
        for (a, b), label in zip(offsets, row.token_labels, strict=True):
            assert label == float(inside[a:b].any()), (e.id, e.answer[a:b])
        flagged = "".join(e.answer[a:b] for (a, b), lab in zip(offsets, row.token_labels, strict=True) if lab)
        for sp in e.spans:  # every annotated word is inside the flagged tokens' text
            assert e.answer[sp.start : sp.end].strip().split()[0] in flagged


def test_span_token_labels_and_rows_without_spans():
    from halluprobe.reader import span_token_labels
    from halubench_data import Span

    offsets = np.array([[0, 3], [3, 8], [8, 12], [12, 13]])
    assert span_token_labels(offsets, [Span(4, 9)]).tolist() == [0, 1, 1, 0]
    assert span_token_labels(offsets, []).tolist() == [0, 0, 0, 0]


def test_pooling_of_token_logits():
    from halluprobe.reader import pool_logits

    z = torch.tensor([-3.0, 0.5, -1.0])
    assert float(pool_logits(z, "max")) == 0.5
    assert float(pool_logits(z, "mean")) == pytest.approx(-7 / 6)
    p = torch.sigmoid(z.double())
    noisy_or = 1 - torch.prod(1 - p)
    got = torch.sigmoid(pool_logits(z.double(), "noisy-or"))
    assert float(got) == pytest.approx(float(noisy_or), rel=1e-9)
    with pytest.raises(ValueError, match="pool must be one of"):
        pool_logits(z, "median")


def test_false_alarm_threshold_keeps_the_mean_rate_over_sources():
    from halluprobe.training._thresholds import false_alarm_threshold

    probs = {"a": np.array([0.1, 0.2, 0.3, 0.4, 0.9]), "b": np.array([0.5, 0.6, 0.7, 0.8])}
    labels = {"a": np.array([0, 0, 0, 0, 1]), "b": np.array([0, 0, 1, 1])}
    t = false_alarm_threshold(probs, labels, 0.25)
    rates = [np.mean(probs[s][labels[s] == 0] >= t) for s in probs]
    assert np.mean(rates) <= 0.25 and t == 0.6
    assert false_alarm_threshold(probs, labels, 0.0) == 0.7
    with pytest.raises(ValueError, match="must lie in"):
        false_alarm_threshold(probs, labels, 1.5)


@pytest.mark.parametrize("rule", ["false-alarm@", "false-alarm@2", "f1", "false-alarm"])
def test_unknown_threshold_rules_are_refused(rule):
    from halluprobe.training._thresholds import check_threshold_rule

    with pytest.raises(ValueError, match="threshold rule must be one of"):
        check_threshold_rule(rule)


def test_batches_respect_the_token_budget_and_row_cap():
    from halluprobe.reader._data import batches

    lengths = [5, 50, 7, 6, 49, 8, 120]
    out = batches(lengths, 100, max_rows=2)
    assert sorted(i for b in out for i in b) == list(range(7))
    for b in out:
        assert len(b) <= 2 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 100)
    shuffled = batches(lengths, 100, np.random.default_rng(0))
    assert sorted(i for b in shuffled for i in b) == list(range(7))


def test_an_anchored_copy_chooses_its_weight_on_validation(fitted_reader):
    from halluprobe.reader._calibrate import rescored

    val = [e for e in toy_examples() if e.split == "validation"]
    mixed = rescored(fitted_reader, val, anchor=True)
    assert mixed.scoring_.anchor is not None and 0 < mixed.scoring_.anchor.weight <= 1
    assert fitted_reader.scoring_.anchor is None  # the original is unchanged
    assert mixed.adapter_ is fitted_reader.adapter_
    test = [e for e in toy_examples() if e.split == "test"]
    p = mixed.predict_proba(test)[:, 1]
    assert np.all((p > 0) & (p < 1)) and mixed.probe_.feature_set.startswith("O+reader@")


def test_test_metrics_of_a_reader(fitted_reader):
    from halluprobe.reader._data import as_examples
    from halluprobe.reader._evaluate import evaluate_reader

    test = as_examples([e for e in toy_examples() if e.split == "test"], None, None)
    res = evaluate_reader(fitted_reader, test, n_bootstrap=50)
    assert res["auroc"] > 0.9 and 0 <= res["false_alarm_rate"] <= 1
    assert res["span_answers"] > 0 and 0 < res["span_f1"] <= 1 and res["token_auroc"] > 0.8


def test_reader_rows_in_leave_one_source_out(toy_proxy):
    """One fine-tuning per held-out source; the rows reader and O+reader in the transfer table."""
    from halluprobe.evaluation import leave_one_source_out
    from halluprobe.evaluation._transfer import floor_fitter
    from halluprobe.reader import ReaderSettings
    from halluprobe.reader._transfer import (
        fold_scores,
        held_out_aurocs,
        read_fold_scores,
        reader_fitter,
        write_fold_scores,
    )
    from halubench_data import Dataset

    examples = toy_examples(90)
    settings = ReaderSettings(**{**FAST, "epochs": 2.0})
    folds = fold_scores(examples, settings, proxy=toy_proxy, device="cpu")
    assert set(folds) == {"a", "b"}
    for name, fold in folds.items():  # scores of the held-out source and of the others' validation split
        want = {e.id for e in examples if e.source == name or e.split == "validation"}
        assert set(fold["scores"]) == want and fold["steps"] > 0
    path = write_fold_scores(Path(toy_proxy).parent / "scores.json", folds, {"settings": settings.as_dict()})
    back = read_fold_scores(path)
    table = leave_one_source_out(
        Dataset(tuple(examples), "toy"), fitters=[floor_fitter, reader_fitter(back)], n_bootstrap=20
    )
    methods = {(r.source, r.method) for r in table.rows}
    assert {("a", "reader"), ("b", "reader"), ("a", "O+reader"), ("b", "O+reader")} <= methods
    assert all(r.kind == "reader" for r in table.rows if "reader" in r.method)
    # the quick reading of the raw scores: a Platt slope keeps their ranking or reverses it (the toy's
    # mixed rows separate so well that their calibrated probabilities saturate into ties: not compared)
    quick = held_out_aurocs(examples, back)
    for r in table.rows:
        if r.method == "reader":
            assert min(abs(quick["reader"][r.source] - a) for a in (r.auroc, 1 - r.auroc)) < 1e-12
    assert set(quick["O+reader"]) == {"a", "b", "mean"}


def test_cli_finetune_then_predict_the_folder(toy_proxy, tmp_path, capsys):
    from halluprobe.cli import main
    from halubench_data import write_jsonl

    data = tmp_path / "toy.jsonl"
    write_jsonl(toy_examples(), data)
    out = tmp_path / "reader"
    argv = ["finetune", "--dataset", str(data), "--proxy", toy_proxy, "--out", str(out), "--device", "cpu",
            "--epochs", "2", "--max-batch-tokens", "512", "--learning-rate", "0.01",
            "--n-bootstrap", "20"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "test: AUROC" in printed.out and "fine-tuning on" in printed.err
    report = json.loads((out / "finetune.json").read_text())
    assert report["test"]["n"] == sum(e.split == "test" for e in toy_examples())
    assert main(argv) == 2  # a folder holding a run's outputs is refused without --overwrite
    assert "--overwrite" in capsys.readouterr().err
    e = next(x for x in toy_examples() if x.split == "test" and x.label)
    assert main(["predict", str(out), "--context", e.context, "--answer", e.answer, "--spans",
                 "--device", "cpu", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert 0 < doc["probability"] < 1 and doc["label"] in (0, 1) and math.isfinite(doc["threshold"])


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--rank", "0"], "reader setting rank = 0 is out of range"),
        (["--epochs", "0"], "reader setting epochs"),
        (["--threshold-rule", "f1"], "threshold rule must be one of"),
        (["--pool", "median"], "invalid choice"),
    ],
)
def test_cli_finetune_refuses_bad_settings_before_the_proxy_loads(
    tmp_path, capsys, monkeypatch, flags, match
):
    import flashstats_hf
    from halluprobe.cli import main

    def no_proxy(*args, **kwargs):
        raise AssertionError("the proxy was loaded")

    monkeypatch.setattr(flashstats_hf, "load_model", no_proxy)
    with pytest.raises(SystemExit) if "invalid choice" in match else _nothing():
        assert main(["finetune", "--out", str(tmp_path / "o"), "--device", "cpu", *flags]) == 2
    assert match in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_server_scores_with_a_reader(fitted_reader):
    from halluprobe.serving import ScoringService
    from halluprobe.serving.schemas import ScoreItem

    service = ScoringService(fitted_reader)
    try:
        e = next(x for x in toy_examples() if x.split == "test")
        [res] = service.score([ScoreItem(context=e.context, question=e.question, answer=e.answer)])
        want = fitted_reader.predict_text(e.context, e.question, e.answer)
        assert res.probability == pytest.approx(want.probability) and res.label == want.label
        card = service.card()
        assert card.feature_set.startswith("reader") and card.spans == "token_scores"
    finally:
        service.close()


def test_finetune_is_a_kind_of_the_training_pipeline(tmp_path):
    """``halluprobe finetune`` reads its flags once into TrainOptions; its fit stage reads no records."""
    from halluprobe.cli._finetune import finetune_options
    from halluprobe.cli._parser import build_parser
    from halluprobe.pipeline import FIT_STAGES, check_options
    from halubench_data import write_jsonl

    data = tmp_path / "toy.jsonl"
    write_jsonl(toy_examples(40), data)
    args = build_parser().parse_args(
        ["finetune", "--dataset", str(data), "--out", str(tmp_path / "o"), "--rank", "4", "--anchor"]
    )
    o = finetune_options(args)
    assert o.kind == "finetune" and o.finetune.rank == 4 and o.finetune.anchor
    assert not FIT_STAGES["finetune"].reads(o)  # no extraction stage: the reader reads the text
    inputs = check_options(o)
    assert [len(ds) for ds in inputs.datasets] == [40]
