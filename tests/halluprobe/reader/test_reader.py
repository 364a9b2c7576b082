"""The fine-tuned reader on a tiny random Llama: it learns, saves, loads, refuses, clones, streams."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from .conftest import FAST, PLANTED, save_proxy, toy_examples  # noqa: TID252 (the fixtures' helpers)


def test_the_loss_falls_and_the_head_finds_the_planted_tokens(fitted_reader):
    history = fitted_reader.card_["training"]["history"]
    assert history[-1]["train_loss"] < 0.7 * history[0]["train_loss"]
    test = [e for e in toy_examples() if e.split == "test"]
    scored = fitted_reader.token_logits([(e.context, e.question, e.answer) for e in test])
    tok = fitted_reader.extractor().tokenizer
    planted, other = [], []
    for ids, start, z in scored:
        for t, score in zip(ids[start:], z, strict=True):
            (planted if tok.decode([t]).strip() in PLANTED else other).append(score)
    # token AUROC of the planted words against every other answer token
    wins = np.mean([p > o for p in planted for o in other])
    assert len(planted) > 5 and wins > 0.9
    from sklearn.metrics import roc_auc_score

    y = np.array([e.label for e in test])
    assert roc_auc_score(y, fitted_reader.predict_proba(test)[:, 1]) > 0.9


def test_fit_is_deterministic_under_a_seed(toy_proxy):
    from halluprobe.reader import Reader

    rows = [e for e in toy_examples(60) if e.split != "test"]
    fits = [Reader(toy_proxy, device="cpu", **{**FAST, "epochs": 1.0}, seed=s).fit(rows) for s in (3, 3, 4)]
    for k, v in fits[0].adapter_.items():
        assert torch.equal(v, fits[1].adapter_[k]), k
    assert any(not torch.equal(v, fits[2].adapter_[k]) for k, v in fits[0].adapter_.items())
    test = [e for e in toy_examples(60) if e.split == "test"]
    assert np.array_equal(fits[0].predict_proba(test), fits[1].predict_proba(test))


def test_save_then_load_gives_identical_probabilities_and_spans(fitted_reader, tmp_path):
    import halluprobe
    from halluprobe.reader import Reader

    test = [e for e in toy_examples() if e.split == "test"]
    folder = fitted_reader.save(tmp_path / "reader")
    loaded = halluprobe.load(folder)
    assert isinstance(loaded, Reader) and loaded.source == folder
    assert np.array_equal(loaded.predict_proba(test), fitted_reader.predict_proba(test))
    triples = [(e.context, e.question, e.answer) for e in test]
    a, b = fitted_reader.predict_batch(triples), loaded.predict_batch(triples)
    assert [(p.probability, p.label, p.spans) for p in a] == [(p.probability, p.label, p.spans) for p in b]
    card = json.loads((folder / "detector.json").read_text())
    assert card["kind"] == "reader" and card["card"]["proxy"]["digest"] and card["card"]["sources"]
    assert set(card["card"]["training"]) >= {"steps", "best_step", "tokens_per_second", "history"}
    assert (folder / "detector.safetensors").stat().st_size < 1 << 20


def test_spans_come_from_the_token_head_and_only_on_a_hallucinated_verdict(fitted_reader):
    test = [e for e in toy_examples() if e.split == "test"]
    preds = fitted_reader.predict_batch([(e.context, e.question, e.answer) for e in test])
    for p in preds:
        assert p.label == int(p.probability >= fitted_reader.scoring_.threshold)
        if not p.label:
            assert p.spans == ()
        assert len(p.token_scores) == len(p.tokens)
    pairs = [(e, p) for e, p in zip(test, preds, strict=True) if e.label and p.label]
    hits = [any(e.answer[s.start : s.end].strip() in PLANTED for s in p.spans) for e, p in pairs]
    assert hits and np.mean(hits) > 0.7


def test_the_estimator_clones_and_keeps_its_parameters(fitted_reader):
    from sklearn.base import clone

    twin = clone(fitted_reader)
    assert twin.get_params() == fitted_reader.get_params()
    assert not hasattr(twin, "adapter_") and not hasattr(twin, "scoring_")
    assert twin.set_params(rank=4).rank == 4


def test_streaming_a_reader_ends_at_its_teacher_forced_probability(fitted_reader):
    from halluprobe import StreamingScorer
    from halluprobe.reader._stream import ReaderStreamingScorer

    e = next(x for x in toy_examples() if x.split == "test" and x.label)
    scorer = StreamingScorer(fitted_reader)
    assert isinstance(scorer, ReaderStreamingScorer)
    follower = scorer.follow(e.context, e.question)
    updates = [u for w in e.answer.split(" ") if (u := follower.add(w + " ")) is not None]
    last = follower.finish()
    assert updates and last.done
    whole = fitted_reader.predict_text(e.context, e.question, e.answer)
    assert last.probability == pytest.approx(whole.probability, abs=1e-5)


def _reader_folder(fitted_reader, tmp_path):
    folder = fitted_reader.save(tmp_path / "r")
    return folder, json.loads((folder / "detector.json").read_text())


def _rehash(folder, doc):
    """Write ``doc`` back with a valid integrity hash (a tampering that only the field checks can catch)."""
    from halluprobe.detectors._detector_file import document_digest

    doc["integrity"] = document_digest(doc)
    (folder / "detector.json").write_text(json.dumps(doc))


def test_a_reader_on_a_proxy_of_another_shape_is_refused_naming_the_tensor(fitted_reader, tmp_path):
    from halluprobe.reader import Reader

    folder, doc = _reader_folder(fitted_reader, tmp_path)
    wide = save_proxy(tmp_path / "wide", width=96)
    doc["proxy"] = wide
    _rehash(folder, doc)
    reader = Reader.load(folder)
    with (
        pytest.warns(UserWarning, match="trained from weights with digest"),
        pytest.raises(ValueError, match=r"tensor 'model\.layers\.0\.\S+' has shape \(\d+, \d+\); this proxy"),
    ):
        reader.predict_proba([("a", "b", "c")])
    deep = save_proxy(tmp_path / "deep", layers=3)
    doc["proxy"] = deep
    _rehash(folder, doc)
    with (
        pytest.warns(UserWarning, match="trained from weights with digest"),
        pytest.raises(ValueError, match="has no tensor 'model.layers.2"),
    ):
        Reader.load(folder).predict_proba([("a", "b", "c")])


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["adapter"].update(rank=4), "is not a rank-4 adapter"),
        (lambda d: d["adapter"].update(targets=["q_proj"]), "is not a rank-8 adapter of the targets"),
        (lambda d: d.update(pool="median"), "field 'pool' must be one of"),
        (lambda d: d.update(threshold=1.5), "field 'threshold' must be a probability"),
        (lambda d: d.update(calibration=[1.0]), "field 'calibration' must be"),
        (lambda d: d["spans"].update(gap=-1), "field 'spans'"),
        (lambda d: d.update(anchor={"weight": 2, "overlap": [0, 1], "reader": [0, 1]}), "field 'anchor'"),
        (lambda d: d["card"]["proxy"].update(width=65), r"head.proj.weight' must have shape \(1, 65\)"),
    ],
)
def test_tampered_and_rehashed_fields_are_refused_at_load(fitted_reader, tmp_path, edit, match):
    from halluprobe.reader import Reader

    folder, doc = _reader_folder(fitted_reader, tmp_path)
    edit(doc)
    _rehash(folder, doc)
    with pytest.raises(ValueError, match=match):
        Reader.load(folder)


def test_edits_without_a_new_hash_and_a_probe_loader_are_refused(fitted_reader, tmp_path):
    from halluprobe import Detector
    from halluprobe.reader import Reader

    folder, doc = _reader_folder(fitted_reader, tmp_path)
    with pytest.raises(ValueError, match="holds a fine-tuned reader"):
        Detector.load(folder)
    raw = bytearray((folder / "detector.safetensors").read_bytes())
    raw[-1] ^= 1
    (folder / "detector.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="does not match the hash"):
        Reader.load(folder)
    doc["threshold"] = 0.01
    (folder / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="integrity hash"):
        Reader.load(folder)


def test_rows_it_cannot_use_are_named(toy_proxy):
    from halluprobe.reader import Reader

    rows = toy_examples(20)
    bad = [*rows[:5], {"context": "c", "answer": "a", "label": 2, "id": "x7"}]
    with pytest.raises(ValueError, match=r"row 5 \('x7'\): label must be 0"):
        Reader(toy_proxy).fit(bad)
    with pytest.raises(ValueError, match="row 1 .* the answer non-empty"):
        Reader(toy_proxy).fit([rows[0], {"context": "c", "answer": " ", "label": 0}])
