"""Reported spans never start or end inside a word or a number, on real RAGTruth answers.

A proxy's tokens are pieces of words (SmolLM2 reads ``Tarrow`` as ``T`` + ``arrow`` and ``1999`` digit by
digit), so spans decoded from flagged tokens used to cut words: ``T`` out of ``Tarrow``, ``in 19``.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from halluprobe.localisation import decode_spans
from halluprobe.localisation._verdict_spans import verdict_spans

RAGTRUTH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ragtruth"
needs_ragtruth = pytest.mark.skipif(not RAGTRUTH.is_dir(), reason=f"RAGTruth not found at {RAGTRUTH}")


def _cuts(text: str, i: int) -> bool:
    """Whether a boundary at ``i`` splits a word (two letters or digits) or a number (``3|.5``, ``3.|5``)."""
    if not 0 < i < len(text):
        return False
    a, b = text[i - 1], text[i]
    if a.isalnum() and b.isalnum():
        return True
    digits = text[i - 2 : i + 2] if i >= 2 else ""
    return (a.isdigit() and b in ".," and text[i + 1 : i + 2].isdigit()) or (
        a in ".," and b.isdigit() and digits[:1].isdigit()
    )


def _answers(n: int) -> list[str]:
    out = []
    for name in ("ragtruth_qa.jsonl", "ragtruth_summary.jsonl", "ragtruth_data2txt.jsonl"):
        with open(RAGTRUTH / name, encoding="utf-8") as f:
            for line in f:
                out += [r["response"] for r in json.loads(line)["responses"] if r["response"].strip()]
                if len(out) >= n * (1 + ("qa", "summary", "data2txt").index(name.split("_")[1][:-6])):
                    break
    return out


def _reported(answer: str, offsets: np.ndarray, rng) -> tuple[list, np.ndarray]:
    """The spans a hallucinated prediction reports for random token scores, and the flagged tokens."""
    scores = rng.random(len(offsets))
    flagged = scores >= 0.7
    spans = decode_spans(offsets, scores, 0.7, len(answer))
    return list(verdict_spans(1, spans, offsets, scores, ("", "", answer), 0.9)), flagged


def _check(answer: str, offsets: np.ndarray, spans: list, flagged: np.ndarray) -> None:
    for sp in spans:
        text = answer[sp.start : sp.end]
        assert not _cuts(answer, sp.start) and not _cuts(answer, sp.end), (text, answer)
        assert text == text.strip() and text, (text, answer)
    for (a, b), hit in zip(offsets, flagged, strict=True):
        if hit and answer[a:b].strip():  # a flagged token's characters stay covered (spaces aside)
            inner = [i for i in range(a, b) if not answer[i].isspace()]
            assert all(any(sp.start <= i < sp.end for sp in spans) for i in inner), (answer[a:b], answer)
    assert all(s.end < t.start for s, t in zip(spans, spans[1:], strict=False))  # disjoint, in order


def test_a_span_of_one_word_piece_covers_the_word():
    answer = "Tarrow Systems was founded in Porto in 1999 by Maria Costa. It costs 10.5 or 1,000 units."
    pieces = ["T", "arrow", " Systems", " was", " founded", " in", " Port", "o", " in", " ", "1", "9", "9",
              "9", " by", " Maria", " Costa", ".", " It", " costs", " 1", "0", ".", "5", " or", " 1", ",",
              "000", " units", "."]  # fmt: skip
    ends = np.cumsum([len(p) for p in pieces])
    offsets = np.stack([ends - [len(p) for p in pieces], ends], axis=1)
    assert "".join(pieces) == answer

    def spans_of(*flagged: str) -> list[str]:
        scores = np.array([float(p in flagged) for p in pieces])
        decoded = decode_spans(offsets, scores, 0.5, len(answer))
        return [
            answer[s.start : s.end] for s in verdict_spans(1, decoded, offsets, scores, ("", "", answer), 1.0)
        ]

    assert spans_of("T") == ["Tarrow"]
    assert spans_of(" Port") == ["Porto"]
    assert spans_of(" ", "1", " 1") == ["1999", "10.5", "1,000"]  # a first digit takes its number
    assert spans_of(".") == [".", "10.5", "."]  # the '.' inside 10.5 takes the number; the others stand alone


@needs_ragtruth
def test_spans_on_ragtruth_answers_cut_no_word_with_word_pieces():
    rng = np.random.default_rng(0)
    for answer in _answers(100):
        bounds, i = [0], 0
        while i < len(answer):  # word pieces of 1 to 4 characters, spaces kept at their fronts
            i = min(len(answer), i + int(rng.integers(1, 5)))
            bounds.append(i)
        offsets = np.stack([bounds[:-1], bounds[1:]], axis=1)
        spans, flagged = _reported(answer, offsets, rng)
        _check(answer, offsets, spans, flagged)


@needs_ragtruth
@pytest.mark.slow  # loads SmolLM2 for its tokenizer
def test_spans_on_ragtruth_answers_cut_no_word_with_the_proxy_tokens():
    from flashstats_hf import load_model
    from halluprobe.features import token_offsets

    _, tok = load_model(None, device="cpu")
    rng = np.random.default_rng(1)
    for answer in _answers(100):
        ids = tok(answer, add_special_tokens=False)["input_ids"]
        offsets = np.asarray(token_offsets(tok, answer, ids))
        spans, flagged = _reported(answer, offsets, rng)
        _check(answer, offsets, spans, flagged)
