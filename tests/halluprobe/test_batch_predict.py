"""Detector.predict_batch, spans from a saved token probe, and ``halluprobe predict --input/--json/--spans``.

A tiny random Llama with a character tokenizer stands in for the proxy (real ``record_forward``).
"""

import copy
import json
from dataclasses import replace

import numpy as np
import pytest
from halluprobe.cli import main
from halluprobe.detectors import Detector
from halluprobe.features import TokenExample, reduce_forward, token_features, token_offsets
from halluprobe.localisation import decode_spans, fit_token_probe, whole_words
from halluprobe.training import fit_blocks, make_blocks

TRIPLES = [
    ("Ada lives in Lyon.", "Where?", "Ada lives in Rome."),
    ("The sky is blue today and warm.", "Colour?", "Blue."),
    ("Ben has two cats.", "", "Ben has two cats and a dog."),
    ("Water boils at 100 C at sea level.", "When?", "At 90 C."),
    ("Cleo wrote three novels.", "How many?", "Three."),
]


@pytest.fixture(scope="module")
def ext(char_llama, char_extractor):
    return char_extractor(char_llama)


def _examples(ext, triples):
    from types import SimpleNamespace

    items = [
        SimpleNamespace(id=f"e{i}", context=c, question=q, answer=a) for i, (c, q, a) in enumerate(triples)
    ]
    encoded = [ext.encode(it) for it in items]
    fs = ext.forward(encoded)
    return items, encoded, fs, reduce_forward(fs, [it.id for it in items])


@pytest.fixture(scope="module")
def detector(ext):
    _, _, _, recs = _examples(ext, TRIPLES * 4)
    y = np.arange(len(recs)) % 2
    fit = fit_blocks(make_blocks("A7L9", heads=[0, 3], k=1), "A7L9", recs[:12], y[:12], recs[12:], y[12:])
    return Detector.from_probe(fit, hidden_layers=ext.hidden_layers)


def test_predict_batch_matches_single_predictions(ext, detector, monkeypatch):
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    batch = detector.predict_batch(TRIPLES, batch_size=2)
    assert len(batch) == len(TRIPLES)
    for (c, q, a), got in zip(TRIPLES, batch, strict=True):
        one = detector.predict_text(c, q, a)
        assert got.probability == pytest.approx(one.probability, abs=1e-5)
        np.testing.assert_allclose(got.token_scores, one.token_scores, atol=1e-5)
        assert got.tokens == list(a) and got.label == int(got.probability >= got.threshold)
        flagged = {i for i, s in enumerate(got.token_scores) if s >= got.threshold}
        if not got.label:  # spans agree with the verdict: none on a supported answer
            assert got.spans == ()
        elif flagged:  # one char per token: the flagged characters, widened to whole words
            runs = decode_spans(
                np.array([[i, i + 1] for i in range(len(a))]), got.token_scores, got.threshold, len(a)
            )
            assert [(sp.start, sp.end) for sp in got.spans] == [
                (w.start, w.end) for w in whole_words(runs, a)
            ]
            covered = {i for sp in got.spans for i in range(sp.start, sp.end)}
            assert {i for i in flagged if not a[i].isspace()} <= covered
            for sp in got.spans:  # the mean per-token probability of the span's tokens
                assert sp.confidence == pytest.approx(float(np.mean(got.token_scores[sp.start : sp.end])))
    with pytest.raises(ValueError, match="item 1: the answer is empty"):
        detector.predict_batch([TRIPLES[0], ("c", "q", " ")])
    with pytest.raises(ValueError, match="item 0: expected a"):
        detector.predict_batch([("c", "a")])


def test_saved_token_probe_gives_the_spans(ext, detector, tmp_path, monkeypatch):
    items, encoded, fs, recs = _examples(ext, TRIPLES * 2)
    rng = np.random.default_rng(0)
    examples = []
    for b, (it, (ids, start)) in enumerate(zip(items, encoded, strict=True)):
        gold = rng.random(len(it.answer)) < 0.4
        feats = token_features(fs, b, recs[b].answer_len)
        examples.append(
            TokenExample(feats, token_offsets(ext.tokenizer, it.answer, ids[start:]), gold, it.id)
        )
    # a neighbourhood view, smoothing and gap merging, all saved with the detector
    probe = fit_token_probe(examples[:6], examples[6:], windows=(2,), smooths=(1,), gaps=(2,))
    assert (probe.window, probe.smooth, probe.gap) == (2, 1, 2)
    flag_all = replace(detector.probe_, threshold=0.0)  # every answer hallucinated: its spans are reported
    Detector.from_probe(flag_all, hidden_layers=ext.hidden_layers, token_probe=probe).save(tmp_path / "d")
    loaded = Detector.load(tmp_path / "d")
    for field in ("mean", "scale", "coef"):
        np.testing.assert_array_equal(getattr(loaded.token_probe_, field), getattr(probe, field))
    assert (loaded.token_probe_.threshold, loaded.token_probe_.C) == (probe.threshold, probe.C)
    assert (loaded.token_probe_.window, loaded.token_probe_.smooth, loaded.token_probe_.gap) == (2, 1, 2)
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    (pred,) = loaded.predict_batch([TRIPLES[0]])
    _, (enc,), fs1, (rec,) = _examples(ext, [TRIPLES[0]])
    feats = token_features(fs1, 0, rec.answer_len)
    want = probe.spans(  # as decoded, then widened to whole words
        feats, token_offsets(ext.tokenizer, TRIPLES[0][2], enc[0][enc[1] :]), len(TRIPLES[0][2])
    )
    assert pred.label == 1 and want
    widened = whole_words(want, TRIPLES[0][2])  # the reported spans cover whole words
    assert [(sp.start, sp.end) for sp in pred.spans] == [(sp.start, sp.end) for sp in widened]
    token_p = 1 / (1 + np.exp(-probe.decision_function(feats)))  # one character per token
    for sp in pred.spans:
        assert sp.confidence == pytest.approx(float(token_p[sp.start : sp.end].mean()))
    assert Detector.load(tmp_path / "d").token_probe_ is not None
    detector.save(tmp_path / "plain")
    assert Detector.load(tmp_path / "plain").token_probe_ is None


def test_cli_predict_input_json_lines(ext, detector, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    detector.save(tmp_path / "d")
    src = tmp_path / "answers.jsonl"
    rows = [{"id": f"a{i}", "context": c, "question": q, "answer": a} for i, (c, q, a) in enumerate(TRIPLES)]
    rows[1].pop("question")
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert (
        main(
            [
                "predict",
                str(tmp_path / "d"),
                "--input",
                str(src),
                "--json",
                "--device",
                "cpu",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    docs = [json.loads(line) for line in lines]
    assert [d["id"] for d in docs] == [r["id"] for r in rows]
    sent = [(c, "" if i == 1 else q, a) for i, (c, q, a) in enumerate(TRIPLES)]  # row 1 has no question
    want = detector.predict_batch(sent)
    for d, w, (_, _, a) in zip(docs, want, sent, strict=True):
        assert d["probability"] == pytest.approx(w.probability, abs=1e-5) and d["label"] in (0, 1)
        assert all(a[s["start"] : s["end"]] == s["text"] for s in d["spans"])
        assert [(s["start"], s["end"], s["confidence"]) for s in d["spans"]] == [
            (sp.start, sp.end, pytest.approx(sp.confidence, abs=1e-5)) for sp in w.spans
        ]
        assert d["label"] or not d["spans"]
    argv = [
        "predict",
        str(tmp_path / "d"),
        "--context",
        "Ada lives in Lyon.",
        "--answer",
        "Ada lives in Rome.",
    ]
    assert main([*argv, "--spans", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "p(hallucinated)" in out and "spans: " in out


def _predict_file(detector, triples, tmp_path, capsys):
    """``predict --input F --threshold expected-f1 --json`` of ``detector`` saved to ``tmp_path / "d"``."""
    detector.save(tmp_path / "d")
    src = tmp_path / "answers.jsonl"
    src.write_text(
        "".join(json.dumps({"context": c, "question": q, "answer": a}) + "\n" for c, q, a in triples)
    )
    argv = ["predict", str(tmp_path / "d"), "--input", str(src), "--json", "--device", "cpu"]
    assert main([*argv, "--threshold", "expected-f1"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()], src


def test_predict_batch_labels_at_a_given_or_expected_f1_threshold(
    ext, detector, tmp_path, monkeypatch, capsys
):
    from halluprobe import expected_f1_threshold

    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    triples = TRIPLES * 4  # 20 answers: the fewest the batch threshold takes
    base = detector.predict_batch(triples)
    probs = np.array([p.probability for p in base])
    want = {0.5: 0.5, "expected-f1": expected_f1_threshold(probs), None: detector.probe_.threshold}
    for given, t in want.items():
        got = detector.predict_batch(triples, threshold=given)
        np.testing.assert_array_equal([p.probability for p in got], probs)  # probabilities never change
        assert all(p.threshold == t and p.label == int(p.probability >= t) for p in got)
        assert all(p.label or not p.spans for p in got)  # spans still agree with the verdict
    flag_all = detector.predict_batch(triples[:3], threshold=0.0)
    assert [p.label for p in flag_all] == [1, 1, 1] and any(p.spans for p in flag_all)
    with pytest.raises(ValueError, match="at least 20 answers of one source, got 19"):
        detector.predict_batch(triples[:19], threshold="expected-f1")
    for bad in (1.5, -0.1, "median", True):
        with pytest.raises(ValueError, match="threshold must be None"):
            detector.predict_batch(triples[:2], threshold=bad)
    # the CLI: --threshold T or expected-f1 (with --input, enough answers)
    docs, src = _predict_file(detector, triples, tmp_path, capsys)
    assert all(d["threshold"] == pytest.approx(want["expected-f1"]) for d in docs)
    assert [d["label"] for d in docs] == [
        p.label for p in detector.predict_batch(triples, threshold="expected-f1")
    ]
    short = tmp_path / "short.jsonl"
    short.write_text(src.read_text().split("\n", 1)[0] + "\n")
    cases = [
        (["--input", str(short), "--threshold", "expected-f1"], "needs at least 20 answers"),
        (["--context", "c", "--answer", "a", "--threshold", "expected-f1"], "applies to --input only"),
        (["--input", str(src), "--threshold", "2"], "a probability in [0, 1] or expected-f1, got '2'"),
    ]
    for extra, match in cases:
        assert main(["predict", str(tmp_path / "d"), *extra, "--device", "cpu"]) == 2
        assert match in capsys.readouterr().err


def test_expected_f1_keeps_the_detector_s_labels_on_a_batch_it_calls_supported(
    ext, detector, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    triples = TRIPLES * 4
    probs = np.array([p.probability for p in detector.predict_batch(triples)])
    strict = copy.deepcopy(detector)  # a detector that calls every one of these answers supported
    strict.probe_ = replace(strict.probe_, threshold=float(probs.max()) + 0.01)
    got = strict.predict_batch(triples, threshold="expected-f1")
    assert all(p.label == 0 and p.threshold == strict.probe_.threshold and not p.spans for p in got)
    docs, _ = _predict_file(strict, triples, tmp_path, capsys)
    assert [d["label"] for d in docs] == [0] * 20
    lenient = copy.deepcopy(detector)  # one that calls them all hallucinated: the batch rule may move it
    lenient.probe_ = replace(lenient.probe_, threshold=float(probs.min()))
    got = lenient.predict_batch(triples, threshold="expected-f1")
    assert all(p.label == int(p.probability >= p.threshold) for p in got) and sum(p.label for p in got) >= 1


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"context": "c"}\n', "answers.jsonl:1: field 'answer' must be a string"),
        ('{"context": "c", "answer": "a"}\n[1]\n', "answers.jsonl:2: expected a JSON object"),
        ("{oops\n", "answers.jsonl:1: malformed JSON"),
        ("\n", "no answers to score"),
        (
            '{"context": "c", "answer": "a"}\n{"context": "c", "answer": " \\n "}\n',
            "answers.jsonl:2: the answer is empty",
        ),
        (
            '{"context": "c", "answer": "a", "id": [1]}\n',
            "answers.jsonl:1: field 'id' must be a string or an integer",
        ),
        (
            '{"context": "c \\udc80", "answer": "a"}\n',
            "answers.jsonl:1: field 'context' is not valid Unicode",
        ),
    ],
)
def test_cli_predict_input_errors_name_the_line(tmp_path, capsys, content, match):
    src = tmp_path / "answers.jsonl"
    src.write_text(content)
    assert main(["predict", str(tmp_path), "--input", str(src), "--device", "cpu"]) == 2
    assert match in capsys.readouterr().err


def test_cli_predict_input_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    src = tmp_path / "answers.jsonl"
    src.write_bytes(b'{"context": "c", "answer": "a"}\n{"context": "caf\xe9", "answer": "a"}\n')
    assert main(["predict", str(tmp_path), "--input", str(src), "--device", "cpu"]) == 2
    assert "answers.jsonl:2: not UTF-8" in capsys.readouterr().err


def test_read_triples_ids_default_to_the_line_number(tmp_path):
    from halluprobe.cli._inputs import read_triples

    src = tmp_path / "answers.jsonl"
    rows = [{"context": "c", "answer": "a", "id": None}, {"context": "c", "answer": "b"}]
    rows += [{"context": "c", "answer": "d", "id": 7}, {"context": "东京", "answer": "🎉", "id": "x"}]
    src.write_text("\n\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    ids, triples = read_triples(src)
    assert ids == ["1", "3", "7", "x"] and triples[3] == ("东京", "", "🎉")
    src.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())  # a UTF-8 byte order mark, as Notepad writes
    assert read_triples(src) == (ids, triples)


def test_cli_predict_needs_one_input_form(tmp_path, capsys):
    assert main(["predict", str(tmp_path), "--context", "c", "--device", "cpu"]) == 2
    assert "either --context and --answer, or --input" in capsys.readouterr().err
    assert main(["predict", str(tmp_path), "--context", "c", "--answer", " ", "--device", "cpu"]) == 2
    assert "--answer is empty" in capsys.readouterr().err
    src = tmp_path / "answers.jsonl"
    src.write_text('{"context": "c", "answer": "a"}\n')
    # an argument that is not UTF-8 reaches Python as lone surrogates (surrogateescape)
    assert main(["predict", str(tmp_path), "--context", "c", "--answer", "\udcff", "--device", "cpu"]) == 2
    assert "--answer is not valid Unicode" in capsys.readouterr().err
    for extra in (["--context", "c"], ["--answer", "a"], ["--question", "q"]):
        assert main(["predict", str(tmp_path), "--input", str(src), *extra, "--device", "cpu"]) == 2
        assert f"{extra[0]} does not apply with --input" in capsys.readouterr().err


def test_token_examples_align_features_offsets_and_gold(ext):
    from types import SimpleNamespace

    from halluprobe.features import token_examples
    from halubench_data import Span

    items = [
        SimpleNamespace(id=f"t{i}", context=c, question=q, answer=a, group=f"g{i}", spans=(Span(0, 3),))
        for i, (c, q, a) in enumerate(TRIPLES)
    ]
    got = token_examples(items, ext, batch_size=2)
    _, encoded, fs, recs = _examples(ext, TRIPLES)
    for b, (ex, it) in enumerate(zip(got, items, strict=True)):
        assert ex.features.shape == (
            len(it.answer),
            recs[b].head_stats.shape[0] * 8 + fs.logit_stats.shape[-1],
        )
        np.testing.assert_allclose(ex.features, token_features(fs, b, recs[b].answer_len), atol=1e-5)
        assert ex.labels.tolist() == [1, 1, 1] + [0] * (len(it.answer) - 3) and ex.group == f"g{b}"


def test_extractor_token_store_writes_what_the_token_probe_reads(char_llama, char_extractor, tmp_path):
    from types import SimpleNamespace

    from halluprobe.features import TokenStore
    from halubench_data import Span

    store = TokenStore(tmp_path / "tokens")
    ext = char_extractor(char_llama, token_store=store)
    items, encoded, fs, recs = _examples(ext, TRIPLES[:2])
    got = ext(items)  # records as without a store, and one token file per answer
    for a, b in zip(got, recs, strict=True):
        np.testing.assert_array_equal(a.head_stats, b.head_stats)
    ex = SimpleNamespace(id="e0", answer=TRIPLES[0][2], spans=(Span(13, 17),), group="g")
    te = store.example(ex)
    want = token_features(fs, 0, recs[0].answer_len).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(te.features, want)
    for view in ("heads", "mean+hidden", "heads+hidden"):  # every view from the one stored file
        want = token_features(fs, 0, recs[0].answer_len, view).astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(store.example(ex, view).features, want)
    np.testing.assert_array_equal(
        te.offsets, token_offsets(ext.tokenizer, TRIPLES[0][2], encoded[0][0][encoded[0][1] :])
    )
    assert te.gold.sum() == 4 and te.gold[13:17].all() and te.group == "g"
    assert len(list((tmp_path / "tokens").glob("*.npz"))) == 2


def test_token_views_are_blocks_of_the_recorded_forward(ext):
    from halluprobe.features._records import head_series
    from halluprobe.features._token_data import TOKEN_VIEWS, compose_view, token_parts

    _, _, fs, recs = _examples(ext, TRIPLES[:2])
    a = recs[1].answer_len
    parts = token_parts(fs, 1, a)
    series = head_series(fs, 1, a)  # [NL, H, 8, A]
    nl, h, s, _ = series.shape
    v = fs.logit_stats.shape[-1]
    dm = fs.hidden.shape[-1]
    nh = len(ext.hidden_layers)
    assert {k: p.shape for k, p in parts.items()} == {
        "mean": (a, nl * s), "heads": (a, nl * h * s), "hidden": (a, nh * dm), "logits": (a, v),
    }  # fmt: skip
    # column (layer, head, statistic) of the per-head block is that statistic of that head
    np.testing.assert_allclose(parts["heads"][:, (1 * h + 3) * s + 2], np.nan_to_num(series[1, 3, 2].numpy()))
    np.testing.assert_allclose(
        parts["mean"], parts["heads"].reshape(a, nl, h, s).mean(2).reshape(a, -1), atol=1e-6
    )
    np.testing.assert_array_equal(parts["hidden"], fs.hidden[1, 0, :a].numpy())
    for view in TOKEN_VIEWS:
        feats = token_features(fs, 1, a, view)
        np.testing.assert_array_equal(feats[:, -v:], parts["logits"])  # the logit statistics come last
        width = {"mean": nl * s, "heads": nl * h * s}[view.split("+")[0]] + ("hidden" in view) * dm + v
        assert feats.shape == (a, width) and feats.dtype == np.float32
        np.testing.assert_array_equal(feats, compose_view(parts, view))
    np.testing.assert_array_equal(token_features(fs, 1, a), token_features(fs, 1, a, "mean"))
    with pytest.raises(ValueError, match=r"unknown token feature view 'hidden'; expected one of"):
        token_features(fs, 1, a, "hidden")
    no_hidden = dict(parts, hidden=np.zeros((a, 0), np.float32))
    with pytest.raises(ValueError, match=r"needs hidden states \(record the forward with hidden_layers\)"):
        compose_view(no_hidden, "heads+hidden")


def test_token_probe_on_the_hidden_view_is_saved_and_predicts_its_spans(ext, detector, tmp_path, monkeypatch):
    items, encoded, fs, recs = _examples(ext, TRIPLES * 2)
    rng = np.random.default_rng(1)
    examples = [
        TokenExample(token_features(fs, b, recs[b].answer_len, "mean+hidden"),
                     token_offsets(ext.tokenizer, it.answer, ids[start:]),
                     rng.random(len(it.answer)) < 0.4, it.id)
        for b, (it, (ids, start)) in enumerate(zip(items, encoded, strict=True))
    ]  # fmt: skip
    probe = fit_token_probe(examples[:6], examples[6:], windows=(0,), view="mean+hidden")
    assert probe.view == "mean+hidden"
    Detector.from_probe(
        replace(detector.probe_, threshold=0.0), hidden_layers=ext.hidden_layers, token_probe=probe
    ).save(tmp_path / "d")
    loaded = Detector.load(tmp_path / "d")
    assert loaded.token_probe_.view == "mean+hidden"
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    (pred,) = loaded.predict_batch([TRIPLES[0]])
    _, (enc,), fs1, (rec,) = _examples(ext, [TRIPLES[0]])
    feats = token_features(fs1, 0, rec.answer_len, "mean+hidden")
    want = probe.spans(
        feats, token_offsets(ext.tokenizer, TRIPLES[0][2], enc[0][enc[1] :]), len(TRIPLES[0][2])
    )
    assert [(sp.start, sp.end) for sp in pred.spans] == [
        (w.start, w.end) for w in whole_words(want, TRIPLES[0][2])
    ]
    # the probe refuses features of another view, naming the one it reads
    with pytest.raises(ValueError, match=r"reads \d+ features per token \(view 'mean\+hidden', window 0\)"):
        probe.decision_function(token_features(fs1, 0, rec.answer_len, "mean"))
    # a saved view the package does not know is refused at load
    doc = json.loads((tmp_path / "d" / "detector.json").read_text())
    doc["token_probe"]["view"] = "every head"
    from halluprobe.detectors import _detector_file as dfile

    doc.pop("integrity")
    doc["integrity"] = dfile.document_digest(doc)
    (tmp_path / "d" / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"token probe view must be one of .*'every head'"):
        Detector.load(tmp_path / "d")


def test_token_store_refuses_incomplete_parts_and_old_files(tmp_path):
    from types import SimpleNamespace

    from halluprobe.features import TokenStore

    store = TokenStore(tmp_path)
    parts = {k: np.ones((3, 2), np.float32) for k in ("mean", "heads", "hidden", "logits")}
    with pytest.raises(ValueError, match=r"token parts \['logits'\] missing"):
        store.write("x", {k: v for k, v in parts.items() if k != "logits"}, np.zeros((3, 2), np.int32))
    with pytest.raises(ValueError, match="every token part must have 4 rows"):
        store.write("x", parts, np.zeros((4, 2), np.int32))
    assert not list(tmp_path.iterdir())  # nothing half-written
    ex = SimpleNamespace(id="old", answer="abcdef", spans=(), group="g")
    with open(store.path("old"), "wb") as f:  # a file of the earlier single-array format
        np.savez(f, feats=np.ones((3, 2), np.float16), offsets=np.zeros((3, 2), np.int32))
    with pytest.raises(ValueError, match="not a token store file of this version"):
        store.example(ex)


def test_cli_predict_input_scores_the_rows_that_fit_and_names_the_long_one(
    ext, detector, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    monkeypatch.setattr(ext.model.config, "max_position_embeddings", 120)
    detector.save(tmp_path / "d")
    src = tmp_path / "answers.jsonl"
    rows = [{"id": "short", "context": "Ada lives in Lyon.", "answer": "In Rome."}]
    rows += [
        {"id": "long", "context": "x" * 400, "answer": "y"},
        {"context": "Ben has cats.", "answer": "Dogs."},
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    argv = ["predict", str(tmp_path / "d"), "--input", str(src), "--device", "cpu"]
    assert main([*argv, "--json"]) == 2  # documented: exit 2 when a line was not scored
    printed = capsys.readouterr()
    docs = [json.loads(line) for line in printed.out.splitlines()]
    assert [d["id"] for d in docs] == ["short", "long", "3"]
    assert docs[0]["probability"] is not None and docs[2]["label"] in (0, 1)
    assert set(docs[1]) == {"id", "error"} and f"{src}:2: example 'long' has" in docs[1]["error"]
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{src}:2" in warnings[0] and "item" not in printed.err
    assert "1 of 3 answers in --input" in printed.err.splitlines()[-1]
    assert (
        main(["predict", str(tmp_path / "d"), "--context", "x" * 400, "--answer", "y", "--device", "cpu"])
        == 2
    )
    err = capsys.readouterr().err
    assert "example '--context/--question/--answer' has" in err and "None" not in err


def test_batched_host_work_equals_example_by_example(ext, detector):
    """One probe call for the answers and one for all their tokens: the scores of per-example calls."""
    from halluprobe.detectors._prediction import batch_scores, decode_pieces
    from halluprobe.features import token_records
    from halluprobe.features._records import on_host

    _, encoded, fs, recs = _examples(ext, TRIPLES)
    host = on_host(fs)
    assert reduce_forward(host, [r.id for r in recs])[2].sink_topk.tolist() == recs[2].sink_topk.tolist()
    got = batch_scores(detector, host, recs)
    for b, rec in enumerate(recs):
        prob = detector.score_records([rec])[0]
        tokens = detector.score_records(token_records(fs, b, rec))
        assert got[b][0] == pytest.approx(float(prob), abs=1e-12)
        np.testing.assert_allclose(got[b][1], tokens, rtol=0, atol=1e-12)
        assert len(got[b][1]) == rec.answer_len
    answers = [ids[start:] for ids, start in encoded]
    assert decode_pieces(ext.tokenizer, answers) == [[chr(t) for t in a] for a in answers]


def test_decode_pieces_uses_the_batched_decoder_of_a_real_tokenizer():
    from halluprobe.detectors._prediction import decode_pieces
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "a": 1, "b": 2, "Ġc": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    answers = [[1, 2, 3], [], [3]]
    want = [[fast.decode([t], clean_up_tokenization_spaces=False) for t in a] for a in answers]
    assert decode_pieces(fast, answers) == want
    offsets = token_offsets(fast, "a b Ġc", [1, 2, 3], pieces=want[0])
    np.testing.assert_array_equal(offsets, token_offsets(fast, "a b Ġc", [1, 2, 3]))
    with pytest.raises(ValueError, match="2 decoded pieces for 3 tokens"):
        token_offsets(fast, "a b Ġc", [1, 2, 3], pieces=want[0][:2])


@pytest.mark.parametrize("quiet", [False, True], ids=["bar", "quiet"])
def test_cli_predict_input_shows_progress_on_stderr_unless_quiet(
    ext, detector, tmp_path, monkeypatch, capsys, quiet
):
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    monkeypatch.setattr("halluprobe.cli._predict.PROGRESS_CHUNK", 1)  # one update per forward
    detector.save(tmp_path / "d")
    src = tmp_path / "answers.jsonl"
    triples = TRIPLES * 3
    src.write_text(
        "".join(json.dumps({"context": c, "question": q, "answer": a}) + "\n" for c, q, a in triples)
    )
    flags = ["--input", str(src), "--json", "--device", "cpu", "--batch-size", "4"]  # fmt: skip
    flags += ["--quiet"] if quiet else []
    assert main(["predict", str(tmp_path / "d"), *flags]) == 0
    out, err = capsys.readouterr()
    docs = [json.loads(line) for line in out.splitlines()]  # stdout holds the predictions alone
    assert [d["probability"] for d in docs] == pytest.approx(
        [p.probability for p in detector.predict_batch(triples, batch_size=4)], abs=1e-5
    )
    if quiet:
        assert err == ""
    else:
        assert "answers:" in err and f"{len(triples)}/{len(triples)}" in err
