"""What a detector returns for one answer, and the text inputs it takes.

[`Prediction`][halluprobe.Prediction] is what
[`Detector.predict_text`][halluprobe.Detector.predict_text] returns; `as_items` reads the rows of an
``X`` given to [`Detector`][halluprobe.Detector]'s scikit-learn methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from halluprobe.features._records import ExampleRecord
from halluprobe.localisation._verdict_spans import PredictedSpan

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats

    from halluprobe.features._extract import ProxyExtractor
    from halluprobe.localisation._localisation import TokenProbe


@dataclass
class Prediction:
    """What [`Detector.predict_text`][halluprobe.Detector.predict_text] returns for one triple."""

    probability: float
    """Probability that the answer is hallucinated (higher = more likely hallucinated)."""
    label: int
    """1 (hallucinated) when ``probability >= threshold``, else 0."""
    threshold: float
    """The detector's validation-F1 threshold."""
    token_scores: np.ndarray
    """``[A] float64``: per-answer-token probabilities; their logits average to the answer's logit."""
    tokens: list[str]
    """The ``A`` answer tokens as text."""
    spans: tuple[PredictedSpan, ...] = ()
    """Character spans of the answer predicted hallucinated, each with a ``confidence`` in ``[0, 1]``; empty
    when ``label`` is 0 (spans agree with the verdict). From the detector's token probe when it has one
    (tokens whose token-probe score reaches its span threshold), else the tokens whose ``token_scores``
    reach ``threshold`` (`halluprobe.localisation.decode_spans`); for a hallucinated answer where no
    token does, the characters the context does not support (text only). Confidences and the fallback:
    `halluprobe.localisation`. Empty from [`score_stats`][halluprobe.Detector.score_stats], which has
    no token offsets."""


@dataclass
class Item:
    """One (context, question, answer) to score, with the id its record carries."""

    id: str
    context: str
    question: str
    answer: str


def check_triple(i: int, triple: Any) -> tuple[str, str, str]:
    """``triple`` as three strings with a non-empty answer, or a ValueError naming item ``i``."""
    if (
        not isinstance(triple, tuple | list)
        or len(triple) != 3
        or not all(isinstance(x, str) for x in triple)
    ):
        raise ValueError(
            f"item {i}: expected a (context, question, answer) triple of strings, got {triple!r:.80}"
        )
    if not triple[2].strip():
        raise ValueError(f"item {i}: the answer is empty")
    return triple[0], triple[1], triple[2]


def as_items(X: Any) -> list[ExampleRecord] | list[Item]:
    """The rows of ``X``: all `ExampleRecord` (features already extracted) or all text items.

    A text row is a `halubench_data.Example` (or any object with ``context``, ``question`` and
    ``answer``), a mapping with ``"context"``, ``"answer"`` and optional ``"question"``, or a
    ``(context, question, answer)`` triple.

    Raises:
        ValueError: ``X`` is a string, empty, mixes records and texts, or a row is none of these.
    """
    if isinstance(X, str | bytes) or not hasattr(X, "__iter__"):
        raise ValueError(f"X must be a sequence of examples or records, got {type(X).__name__}")
    rows = list(X)
    if not rows:
        raise ValueError("X is empty: expected at least one example or record")
    records = [isinstance(r, ExampleRecord) for r in rows]
    if all(records):
        return rows
    if any(records):
        raise ValueError("X mixes ExampleRecord rows and text rows; give one kind")
    items = []
    for i, row in enumerate(rows):
        if isinstance(row, Mapping):
            if "context" not in row or "answer" not in row:
                raise ValueError(f"item {i}: a mapping needs 'context' and 'answer', got keys {sorted(row)}")
            triple: Any = (row["context"], row.get("question", ""), row["answer"])
        elif all(hasattr(row, k) for k in ("context", "question", "answer")):
            triple = (row.context, row.question, row.answer)
        else:
            triple = row
        items.append(Item(f"item{i}", *check_triple(i, triple)))
    return items


def text_records(ext: ProxyExtractor, items: list[Item], batch_size: int) -> list[ExampleRecord]:
    """The records of ``items`` (with grounding features), in order, from forwards of similar lengths."""
    from halluprobe.features._extract import plan_batches

    out: list[Any] = [None] * len(items)
    lengths = [len(ext.encode(it)[0]) for it in items]
    for idx in plan_batches(lengths, batch_size=batch_size):
        for i, record in zip(idx, ext([items[i] for i in idx]), strict=True):
            out[i] = record
    return out


def with_text_features(
    detector: Any,
    ext: ProxyExtractor | None,
    records: list[ExampleRecord],
    items: Sequence[Any] | None,
    answer_ids: Sequence[list[int]] | None = None,
    bare: Sequence[np.ndarray] | None = None,
) -> list[ExampleRecord]:
    """``records`` with the grounding features (block G) and context contrast (block C) ``detector`` reads.

    Args:
        detector: A fitted [`Detector`][halluprobe.Detector].
        ext: The extractor that recorded the records (it runs the contrast forward; None: the
            detector's).
        records: The records, in the order of ``items``.
        items: Objects with ``id``, ``context``, ``question`` and ``answer``; may be None only when
            the detector reads neither block.
        answer_ids: The answer token ids the records were recorded on (default: ``ext.encode``).
        bare: Each answer's log-probabilities without the context when read already (streaming);
            None: the contrast forward runs.

    Raises:
        ValueError: the detector reads block G or C and ``items`` is None.
    """
    if not (detector.uses_grounding or detector.uses_contrast):
        return records
    if items is None:
        raise ValueError(
            f"detector {detector._name} reads text grounding or context contrast features (block G or C): "
            "score_stats needs text=(context, question, answer)"
        )
    if detector.uses_grounding:
        from halluprobe.features._grounding import fill_grounding

        records = fill_grounding(records, items)
    if detector.uses_contrast:
        ext = ext if ext is not None else detector.extractor()
        ids = None if answer_ids is None else list(answer_ids)
        records = ext.with_contrast(records, list(items), ids, None if bare is None else list(bare))
    return records


def text_prediction(
    probe_threshold: float,
    token_probe: TokenProbe | None,
    ext: ProxyExtractor,
    fs: ForwardStats,
    b: int,
    scores: tuple[float, np.ndarray],
    encoded: tuple[list[int], int],
    text: tuple[str, str, str],
) -> Prediction:
    """The `Prediction` of example ``b`` of a forward, with its character spans.

    Args:
        probe_threshold: The detector's threshold.
        token_probe: The detector's token probe, or None (spans from the token scores).
        ext: The extractor that ran the forward (its tokenizer gives the offsets).
        fs: The forward's statistics.
        b: The example's index in the batch.
        scores: The answer's probability and ``[A]`` per-token probabilities.
        encoded: The example's token ids and the index of its first answer token.
        text: ``(context, question, answer)``.
    """
    from halluprobe.features._token_data import token_features, token_offsets
    from halluprobe.localisation._localisation import decode_spans
    from halluprobe.localisation._verdict_spans import token_probe_probs, verdict_spans

    answer = text[2]
    ids, start = encoded
    prob, token_probs = scores
    label = int(prob >= probe_threshold)
    offsets = token_offsets(ext.tokenizer, answer, ids[start:])
    if token_probe is not None:
        answer_len = int(fs.answer_len[b])
        logits = token_probe.decision_function(token_features(fs, b, answer_len, token_probe.view))
        spans = decode_spans(offsets, logits, token_probe.threshold, len(answer), token_probe.gap)
        span_probs = token_probe_probs(logits)
    else:
        spans = decode_spans(offsets, token_probs, probe_threshold, len(answer))
        span_probs = token_probs
    return Prediction(
        probability=prob,
        label=label,
        threshold=probe_threshold,
        token_scores=token_probs,
        tokens=[ext.tokenizer.decode([t], clean_up_tokenization_spaces=False) for t in ids[start:]],
        spans=verdict_spans(label, spans, offsets, span_probs, text, prob),
    )
