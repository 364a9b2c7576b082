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

from halluprobe._threshold import check_threshold
from halluprobe.features._records import ExampleRecord
from halluprobe.localisation._verdict_spans import PredictedSpan

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats
    from halubench_data import Span

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
    """The threshold the label follows: the detector's transferred threshold, unless
    [`Detector.predict_batch`][halluprobe.Detector.predict_batch] was given another."""
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


@dataclass
class PendingPrediction:
    """A scored answer whose label and spans wait for the threshold (`at` completes it)."""

    probability: float
    """The answer's probability of being hallucinated."""
    token_scores: np.ndarray
    """``[A]`` per-token probabilities."""
    tokens: list[str]
    """The ``A`` answer tokens as text."""
    offsets: np.ndarray
    """``[A, 2]`` character ranges of the tokens in the answer."""
    probe_spans: Sequence[Span] | None
    """The token probe's spans (they follow its own threshold), or None (spans from ``token_scores``)."""
    span_probs: np.ndarray
    """``[A]`` per-token probabilities the span confidences come from."""
    text: tuple[str, str, str]
    """``(context, question, answer)``."""

    def at(self, threshold: float) -> Prediction:
        """The `Prediction` with its label and spans at ``threshold``."""
        from halluprobe.localisation._localisation import decode_spans
        from halluprobe.localisation._verdict_spans import verdict_spans

        label = int(self.probability >= threshold)
        spans = self.probe_spans
        if spans is None:
            spans = decode_spans(self.offsets, self.token_scores, threshold, len(self.text[2]))
        return Prediction(
            probability=self.probability,
            label=label,
            threshold=threshold,
            token_scores=self.token_scores,
            tokens=self.tokens,
            spans=verdict_spans(label, spans, self.offsets, self.span_probs, self.text, self.probability),
        )


def pending_prediction(
    token_probe: TokenProbe | None,
    ext: ProxyExtractor,
    fs: ForwardStats,
    b: int,
    scores: tuple[float, np.ndarray],
    encoded: tuple[list[int], int],
    text: tuple[str, str, str],
    pieces: Sequence[str] | None = None,
) -> PendingPrediction:
    """Example ``b`` of a forward, scored, before its threshold is applied.

    Args:
        token_probe: The detector's token probe, or None (spans from the token scores).
        ext: The extractor that ran the forward (its tokenizer gives the offsets).
        fs: The forward's statistics.
        b: The example's index in the batch.
        scores: The answer's probability and ``[A]`` per-token probabilities.
        encoded: The example's token ids and the index of its first answer token.
        text: ``(context, question, answer)``.
        pieces: Each answer token decoded on its own (`decode_pieces`), or None to decode them here.
    """
    from halluprobe.features._token_data import token_features, token_offsets
    from halluprobe.localisation._localisation import decode_spans
    from halluprobe.localisation._verdict_spans import token_probe_probs

    answer = text[2]
    ids, start = encoded
    prob, token_probs = scores
    if pieces is None:
        pieces = decode_pieces(ext.tokenizer, [ids[start:]])[0]
    offsets = token_offsets(ext.tokenizer, answer, ids[start:], pieces=pieces)
    probe_spans, span_probs = None, token_probs
    if token_probe is not None:
        answer_len = int(fs.answer_len[b])
        logits = token_probe.decision_function(token_features(fs, b, answer_len, token_probe.view))
        probe_spans = decode_spans(offsets, logits, token_probe.threshold, len(answer), token_probe.gap)
        span_probs = token_probe_probs(logits)
    return PendingPrediction(prob, token_probs, list(pieces), offsets, probe_spans, span_probs, text)


def decode_pieces(tokenizer: Any, answers: Sequence[Sequence[int]]) -> list[list[str]]:
    """Every token of every answer decoded on its own, in one batched call where the tokenizer has one."""
    flat = [[int(t)] for ids in answers for t in ids]
    batch = getattr(tokenizer, "batch_decode", None)
    if batch is not None:
        texts = list(batch(flat, clean_up_tokenization_spaces=False))
    else:
        texts = [tokenizer.decode(t, clean_up_tokenization_spaces=False) for t in flat]
    out, i = [], 0
    for ids in answers:
        out.append([str(t) for t in texts[i : i + len(ids)]])
        i += len(ids)
    return out


def batch_scores(
    detector: Any, fs: ForwardStats, records: list[ExampleRecord]
) -> list[tuple[float, np.ndarray]]:
    """Each answer's probability and ``[A]`` per-token probabilities, in two probe calls for the batch.

    The answers' records are scored together, then the per-token pseudo-records of every answer
    (`halluprobe.features.token_records`) together; the same scores as example by example.
    """
    from halluprobe.features._records import token_records

    probs = detector.score_records(records)
    tokens = [token_records(fs, b, rec) for b, rec in enumerate(records)]
    flat = detector.score_records([t for per in tokens for t in per])
    bounds = np.cumsum([0, *(len(per) for per in tokens)])
    return [(float(p), flat[a:z]) for p, a, z in zip(probs, bounds[:-1], bounds[1:], strict=True)]


def predict_triples(
    detector: Any,
    triples: Sequence[tuple[str, str, str]],
    *,
    device: str | None,
    batch_size: int,
    threshold: float | str | None,
) -> list[Prediction]:
    """[`Detector.predict_batch`][halluprobe.Detector.predict_batch] (its arguments, checked here)."""
    check_threshold(threshold, len(triples))
    pending = pending_triples(detector, triples, device=device, batch_size=batch_size)
    t = resolve_threshold(threshold, detector.probe_.threshold, pending)
    return [p.at(t) for p in pending]


def resolve_threshold(
    threshold: float | str | None, default: float, pending: Sequence[PendingPrediction]
) -> float:
    """The threshold that a ``threshold`` passed by `check_threshold` names.

    ``default`` for None, the batch threshold of ``pending``'s probabilities for ``"expected-f1"``
    (`halluprobe._threshold.batch_threshold`), else the number itself.
    """
    if threshold is None:
        return float(default)
    if threshold == "expected-f1":  # the detector's own when the batch shows no hallucination
        from halluprobe.training._thresholds import batch_threshold

        return batch_threshold(np.array([p.probability for p in pending]), default)
    return float(threshold)


def pending_triples(
    detector: Any, triples: Sequence[tuple[str, str, str]], *, device: str | None, batch_size: int
) -> list[PendingPrediction]:
    """The triples scored in batched forwards, in input order, before any threshold is applied.

    The host work of a batch (records, scores, token texts and offsets, spans) runs on host copies of
    its statistics, made at once, while the next batch's forward runs on the device. A fine-tuned
    reader scores with its own forward (`halluprobe.Reader.pending_triples`).
    """
    if hasattr(detector, "pending_triples"):
        return detector.pending_triples(triples, device=device, batch_size=batch_size)
    from halluprobe.features._extract import plan_batches
    from halluprobe.features._records import on_host

    items = [Item(f"item{i}", *check_triple(i, t)) for i, t in enumerate(triples)]
    ext = detector.extractor(device)
    encoded = [ext.encode(it) for it in items]
    out: list[PendingPrediction | None] = [None] * len(items)
    waiting = None  # the batch whose statistics are on the host, its host work not yet done
    for idx in plan_batches([len(ids) for ids, _ in encoded], batch_size=batch_size):
        fs = ext.forward([encoded[i] for i in idx])
        done, waiting = waiting, (idx, on_host(fs))  # the next forward is queued before this host work
        if done is not None:
            _finish_batch(detector, ext, items, encoded, *done, out)
    if waiting is not None:
        _finish_batch(detector, ext, items, encoded, *waiting, out)
    return [p for p in out if p is not None]


def _finish_batch(detector: Any, ext: ProxyExtractor, items: list[Item], encoded: list[tuple[list[int], int]],
                  idx: list[int], fs: ForwardStats, out: list) -> None:  # fmt: skip
    """Records, scores and pending predictions of one batch (``fs`` on the host) into ``out``."""
    from halluprobe.features._records import reduce_forward

    records = with_text_features(
        detector, ext, reduce_forward(fs, [items[i].id for i in idx]), [items[i] for i in idx],
        [encoded[i][0][encoded[i][1] :] for i in idx],
    )  # fmt: skip
    scores = batch_scores(detector, fs, records)
    pieces = decode_pieces(ext.tokenizer, [encoded[i][0][encoded[i][1] :] for i in idx])
    for b, i in enumerate(idx):
        it = items[i]
        out[i] = pending_prediction(
            detector.token_probe_, ext, fs, b, scores[b], encoded[i], (it.context, it.question, it.answer),
            pieces[b],
        )  # fmt: skip


def stats_prediction(
    detector: Any,
    fs: ForwardStats,
    tokens: list[str],
    text: tuple[str, str, str] | None,
    answer_ids: list[int] | None,
    bare: np.ndarray | None,
) -> Prediction:
    """[`Detector.score_stats`][halluprobe.Detector.score_stats] (its arguments)."""
    from halluprobe.features._records import on_host, reduce_forward

    fs = on_host(fs)
    items = None if text is None else [Item("query", *text)]
    ids = None if answer_ids is None else [list(answer_ids)]
    records = with_text_features(
        detector, None, reduce_forward(fs, ["query"]), items, ids, None if bare is None else [bare]
    )
    ((prob, token_probs),) = batch_scores(detector, fs, records)
    threshold = detector.probe_.threshold
    return Prediction(prob, int(prob >= threshold), threshold, token_probs, list(tokens))
