"""Streaming scores on a tiny random Llama with a word-level chat tokenizer and a detector fitted on it.

The running probability after every update equals the detector on the answer so far recorded by one
teacher-forced forward, and the last update equals ``Detector.predict`` of the finished answer.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from flashstats_hf import format_prompt
from halluprobe import Detector, StreamingScorer
from halluprobe.cli import main
from halluprobe.detectors import stream_text_chunks
from halluprobe.features import reduce_forward
from halluprobe.training import fit_blocks, make_blocks

from .conftest import Ex, text, tiny_detector  # noqa: TID252

PROB_TOL = 1e-4  # probabilities from statistics equal to 1e-5 (fp32), through a standardised linear probe


@pytest.fixture(scope="module")
def detector() -> Detector:
    return tiny_detector("A7A64L9", heads=(0, 5))


def _teacher_forced(det: Detector, prompt: list[int], answer: list[int]):
    ext = det.extractor()
    return det.score_stats(ext.forward([(prompt + answer, len(prompt))]), ["?"] * len(answer))


def test_following_chunks_equals_teacher_forced_predict(detector):
    rng = np.random.default_rng(5)
    context, question, answer = text(rng, 14), text(rng, 3), text(rng, 9)
    follower = StreamingScorer(detector).follow(context, question)
    updates = [u for chunk in stream_text_chunks(answer, 2) if (u := follower.add(chunk)) is not None]
    updates.append(follower.finish())
    assert [u.answer_tokens for u in updates] == [1, 3, 5, 7, 8, 9] and updates[-1].done
    assert sum(len(u.tokens) for u in updates) == 9 and updates[0].tokens == [answer.split()[0]]
    prompt = format_prompt(detector.extractor().tokenizer, context, question)
    for u in updates:  # the running probability is the detector on the answer so far
        ref = _teacher_forced(detector, prompt, follower.answer_ids[: u.answer_tokens])
        assert u.probability == pytest.approx(ref.probability, abs=PROB_TOL)
        np.testing.assert_allclose(u.token_scores, ref.token_scores[-len(u.tokens) :], atol=PROB_TOL)
    final = detector.predict_text(context, question, answer)
    assert updates[-1].probability == pytest.approx(final.probability, abs=PROB_TOL)
    assert updates[-1].label == final.label
    np.testing.assert_allclose(follower.prediction().token_scores, final.token_scores, atol=PROB_TOL)


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampling"])
def test_self_generation_scores_equal_teacher_forced(detector, sample):
    rng = np.random.default_rng(7)
    context, question = text(rng, 10), text(rng, 2)
    updates = list(
        StreamingScorer(detector).generate(context, question, max_new_tokens=6, do_sample=sample, seed=3)
    )
    assert updates and updates[-1].done and not any(u.done for u in updates[:-1])
    ids = [t for u in updates for t in u.token_ids]
    prompt = format_prompt(detector.extractor().tokenizer, context, question)
    ref = _teacher_forced(detector, prompt, ids)
    assert updates[-1].probability == pytest.approx(ref.probability, abs=PROB_TOL)
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
        next(StreamingScorer(detector).generate(context, max_new_tokens=0))


def test_generation_stops_at_the_models_end_of_turn_token(detector, monkeypatch):
    """An end token that only the generation config names (SmolLM2's ``<|im_end|>``) ends the answer."""
    rng = np.random.default_rng(7)
    context, question = text(rng, 10), text(rng, 2)
    scorer = StreamingScorer(detector)
    ids = [t for u in scorer.generate(context, question, max_new_tokens=6) for t in u.token_ids]
    cut = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])  # first new token after the start
    model = detector.extractor().model
    monkeypatch.setattr(model.generation_config, "eos_token_id", [99, ids[cut]])
    updates = list(scorer.generate(context, question, max_new_tokens=6))
    assert [t for u in updates for t in u.token_ids] == ids[:cut]
    assert updates[-1].done and updates[-1].answer_tokens == cut


def test_follower_errors(detector):
    follower = StreamingScorer(detector).follow("w1 w2", "w3")
    assert follower.add("   ") is None
    with pytest.raises(ValueError, match="the answer is empty"):
        follower.finish()
    with pytest.raises(TypeError, match="text must be a str"):
        follower.add(3)


def test_stream_text_chunks_keep_every_character():
    text = "  a bb  ccc d \n"
    chunks = list(stream_text_chunks(text, 2))
    assert "".join(chunks) == text and len(chunks) == 3


def test_cli_stream_json_lines(detector, tmp_path, capsys, monkeypatch):
    detector.save(tmp_path / "det")
    ext = detector.extractor()  # the loaded copy binds to the tiny proxy, not the default SmolLM2
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    rng = np.random.default_rng(9)
    context, answer = text(rng, 10), text(rng, 5)
    code = main(
        ["stream", str(tmp_path / "det"), "--context", context, "--answer", answer, "--chunk", "2", "--json"]
    )
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["event"] for x in lines] == ["tokens"] * (len(lines) - 1) + ["done"]
    assert sum(len(x["tokens"]) for x in lines[:-1]) == 5
    final = detector.predict_text(context, "", answer)
    assert lines[-1]["probability"] == pytest.approx(final.probability, abs=PROB_TOL)
    assert (
        main(["stream", str(tmp_path / "det"), "--context", context, "--generate", "--max-new-tokens", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "p(hallucinated)" in out
    assert (
        main(["stream", str(tmp_path / "det"), "--context", context]) == 2
    )  # neither --answer nor --generate


def test_cli_stream_follows_stdin(detector, tmp_path, capsys, monkeypatch):
    """``--answer -`` reads the answer from a pipe as it arrives (here: written before reading)."""
    import os
    import sys

    detector.save(tmp_path / "det")
    ext = detector.extractor()
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    rng = np.random.default_rng(11)
    context, answer = text(rng, 8), text(rng, 4)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, answer.encode())
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        monkeypatch.setattr(sys, "stdin", pipe)
        assert main(["stream", str(tmp_path / "det"), "--context", context, "--answer", "-", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["event"] == "done" and lines[-1]["answer_tokens"] == 4
    assert lines[-1]["probability"] == pytest.approx(
        detector.predict_text(context, "", answer).probability, abs=PROB_TOL
    )


def test_stdin_that_is_not_utf8_names_answer_dash(monkeypatch):
    import os
    import sys

    from halluprobe.cli._stream import _stdin_chunks
    from halubench_data.clikit import UsageError

    r, w = os.pipe()
    os.write(w, "东京 ".encode() + b"\xff in Rome.")
    os.close(w)
    with os.fdopen(r, "rb") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        with pytest.raises(UsageError, match="--answer -: stdin is not UTF-8"):
            list(_stdin_chunks())


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--answer", "-", "--chunk", "2"], "--chunk applies to --answer TEXT"),
        (["--generate", "--chunk", "2"], "--chunk applies to --answer TEXT"),
        (["--answer", "x", "--max-new-tokens", "5"], "--max-new-tokens applies to --generate"),
        (["--answer", "x", "--sample"], "--sample applies to --generate"),
        (["--generate", "--temperature", "0.5"], "--temperature applies to --generate --sample"),
        (["--generate", "--seed", "3"], "--seed applies to --generate --sample"),
    ],
)
def test_stream_refuses_a_flag_its_mode_would_ignore(tmp_path, capsys, flags, match):
    assert main(["stream", str(tmp_path), "--context", "c", *flags, "--device", "cpu"]) == 2
    assert match in capsys.readouterr().err


def test_stream_refuses_text_that_is_not_unicode(tmp_path, capsys):
    assert main(["stream", str(tmp_path), "--context", "caf\udce9", "--answer", "x", "--device", "cpu"]) == 2
    assert "--context is not valid Unicode" in capsys.readouterr().err


@pytest.mark.parametrize(
    "mode", [["--answer", "w1 w2 w3", "--chunk", "2"], ["--generate", "--max-new-tokens", "3"]]
)
def test_cli_stream_emits_no_deprecation_warning(detector, tmp_path, capsys, monkeypatch, mode):
    import warnings

    detector.save(tmp_path / "det")
    ext = detector.extractor()
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    with warnings.catch_warnings():
        # every FutureWarning and DeprecationWarning, Transformers' own included (pyproject ignores the
        # DeprecationWarnings raised inside transformers, where a deprecated argument we pass is reported)
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        assert main(["stream", str(tmp_path / "det"), "--context", "w4 w5 w6", *mode, "--json"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"event": "done"')


def test_stream_refuses_a_context_longer_than_the_proxys_positions(detector, monkeypatch):
    ext = detector.extractor()
    monkeypatch.setattr(ext.model.config, "max_position_embeddings", 20)
    scorer = StreamingScorer(detector)
    with pytest.raises(
        ValueError, match="the context has .* tokens but the proxy reads at most 20 positions"
    ):
        scorer.follow("a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3)
    with pytest.raises(ValueError, match="at most 20 positions"):
        list(scorer.generate("a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3))
    with pytest.raises(ValueError, match="temperature"):
        list(scorer.generate("a", do_sample=True, temperature=float("nan")))


def test_streaming_a_grounding_detector_ends_at_its_prediction(detector):
    """A detector with the grounding block G streams too: the last update is its teacher-forced predict."""
    from halluprobe import fill_grounding

    ext = detector.extractor()
    rng = np.random.default_rng(11)
    exs = [Ex(f"g{i}", text(rng, 12), text(rng, 3), text(rng, 5)) for i in range(32)]
    recs = []
    for i in range(0, 32, 8):
        batch = exs[i : i + 8]
        recs += fill_grounding(
            reduce_forward(ext.forward([ext.encode(e) for e in batch]), [e.id for e in batch]), batch
        )
    y = np.arange(32) % 2
    fit = fit_blocks(make_blocks("GL9", heads=[0], k=1), "GL9", recs[:20], y[:20], recs[20:], y[20:])
    det = Detector.from_probe(fit, hidden_layers=ext.hidden_layers)
    det._extractor = ext
    context, question, answer = text(rng, 14), text(rng, 3), text(rng, 6)
    follower = StreamingScorer(det).follow(context, question)
    updates = [u for chunk in stream_text_chunks(answer, 2) if (u := follower.add(chunk)) is not None]
    updates.append(follower.finish())
    final = det.predict_text(context, question, answer)
    assert updates[-1].probability == pytest.approx(final.probability, abs=PROB_TOL)
    assert follower.prediction().probability == pytest.approx(final.probability, abs=PROB_TOL)
