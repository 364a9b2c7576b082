"""Spans that agree with the verdict: a confidence on each span, none on a supported answer.

A [`Prediction`][halluprobe.Prediction] carries spans only when its answer-level label is 1
(hallucinated): an answer the detector calls supported has no hallucinated span. Each span is a
[`PredictedSpan`][halluprobe.PredictedSpan] with a ``confidence`` in ``[0, 1]``, the mean over the
span's tokens of a per-token probability of being hallucinated:

- with a token probe: the probe's probability (the logistic of its token score);
- without one: the detector's own per-token probabilities (``Prediction.token_scores``).

When the answer is called hallucinated but no token reaches the span threshold, the spans are the
answer's characters that the context does not support, text only
([`halubench_data.grounding.unsupported_char_spans`][]); each then has the answer's probability as
its confidence. Higher means more likely hallucinated throughout.

Spans cover whole words and numbers (`whole_words`): a proxy's tokens are pieces of words (``T`` +
``arrow``), so a span decoded from flagged tokens is widened to the words it touches, and loses the
spaces at its ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from halubench_data import Span

from halluprobe._numeric import sigmoid


@dataclass(frozen=True)
class PredictedSpan(Span):
    """A predicted hallucinated span of an answer (``answer[start:end]``) with its confidence."""

    confidence: float = 1.0
    """In ``[0, 1]``, higher = more likely hallucinated: the mean per-token probability of the span's
    tokens (see `halluprobe.localisation._verdict_spans`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"PredictedSpan confidence must lie in [0, 1], got {self.confidence!r}")


_JOINERS = {"digit": ".,", "alpha": "'\u2019"}
"""Characters that stay inside a token between two digits (``3.14``, ``1,000``) or two letters (``don't``)."""


def _inside(text: str, i: int) -> bool:
    """Whether position ``i`` (between ``text[i - 1]`` and ``text[i]``) lies inside a word or a number."""
    if not 0 < i < len(text):
        return False
    a, b = text[i - 1], text[i]
    if a.isalnum() and b.isalnum():
        return True
    for kind, joiners in _JOINERS.items():
        same = str.isdigit if kind == "digit" else str.isalpha
        if b in joiners and same(a) and i + 1 < len(text) and same(text[i + 1]):
            return True  # 10|.5
        if a in joiners and same(b) and i >= 2 and same(text[i - 2]):
            return True  # 10.|5
    return False


def whole_words(spans: Sequence[Span], text: str) -> tuple[Span, ...]:
    """``spans`` of ``text`` widened to the words and numbers they touch, without spaces at their ends.

    A span never starts or ends inside a word or a number afterwards; spans that come to overlap or
    touch are merged, and a span of spaces alone is dropped. Every character of a word that a span
    touched stays covered.
    """
    out: list[Span] = []
    for sp in sorted(spans, key=lambda s: (s.start, s.end)):
        a, b = max(0, min(sp.start, len(text))), max(0, min(sp.end, len(text)))
        while _inside(text, a):
            a -= 1
        while _inside(text, b):
            b += 1
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b <= a:
            continue
        if out and a <= out[-1].end:
            a, b = out[-1].start, max(b, out[-1].end)
            out.pop()
        out.append(Span(a, b, sp.label))
    return tuple(out)


def with_confidence(
    spans: Sequence[Span], offsets: np.ndarray, token_probs: np.ndarray
) -> tuple[PredictedSpan, ...]:
    """Each span with the mean probability of the tokens whose characters overlap it.

    Args:
        spans: Character spans of the answer.
        offsets: ``[A, 2] int``: each token's character offsets in the answer.
        token_probs: ``[A] float``: each token's probability of being hallucinated.

    Returns:
        The spans, in order, as `PredictedSpan`.
    """
    offsets, token_probs = np.asarray(offsets), np.asarray(token_probs, dtype=np.float64)
    out = []
    for sp in spans:
        inside = (offsets[:, 0] < sp.end) & (offsets[:, 1] > sp.start) & (offsets[:, 1] > offsets[:, 0])
        conf = float(token_probs[inside].mean()) if inside.any() else 0.0
        out.append(PredictedSpan(sp.start, sp.end, sp.label, float(np.clip(conf, 0.0, 1.0))))
    return tuple(out)


def text_spans(context: str, question: str, answer: str, probability: float) -> tuple[PredictedSpan, ...]:
    """The answer's unsupported character runs (text only), each with the answer's ``probability``."""
    from halubench_data.grounding import unsupported_char_spans

    found = unsupported_char_spans(context, question, answer)
    runs = [Span(int(a), int(b), "hallucination") for a, b in found if int(b) > int(a)]
    conf = float(np.clip(probability, 0.0, 1.0))
    return tuple(PredictedSpan(sp.start, sp.end, sp.label, conf) for sp in whole_words(runs, answer))


def verdict_spans(
    label: int,
    spans: Sequence[Span],
    offsets: np.ndarray,
    token_probs: np.ndarray,
    text: tuple[str, str, str],
    probability: float,
) -> tuple[PredictedSpan, ...]:
    """The spans a prediction reports: none when ``label`` is 0, else with confidences (module doc).

    Args:
        label: The answer-level verdict (1 = hallucinated).
        spans: Spans decoded from the per-token scores.
        offsets: ``[A, 2] int``: token character offsets.
        token_probs: ``[A] float``: per-token probabilities the spans were decoded from.
        text: ``(context, question, answer)``, for the text-only fallback.
        probability: The answer's probability of being hallucinated.
    """
    if not label:
        return ()
    if spans:
        return with_confidence(whole_words(spans, text[2]), offsets, token_probs)
    return text_spans(*text, probability)


def token_probe_probs(logits: np.ndarray) -> np.ndarray:
    """``[A]`` token-probe probabilities: the logistic of its token scores."""
    return sigmoid(np.asarray(logits, dtype=np.float64))
