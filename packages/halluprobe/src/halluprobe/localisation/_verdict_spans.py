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

    runs = unsupported_char_spans(context, question, answer)
    conf = float(np.clip(probability, 0.0, 1.0))
    return tuple(PredictedSpan(int(a), int(b), "hallucination", conf) for a, b in runs if int(b) > int(a))


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
        return with_confidence(spans, offsets, token_probs)
    return text_spans(*text, probability)


def token_probe_probs(logits: np.ndarray) -> np.ndarray:
    """``[A]`` token-probe probabilities: the logistic of its token scores."""
    return sigmoid(np.asarray(logits, dtype=np.float64))
