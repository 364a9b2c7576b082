"""The library behind ``halluprobe serve``: score items, describe the detector, follow a stream.

Every HTTP route of `halluprobe.serving.app` is one call of a
[`ScoringService`][halluprobe.serving.ScoringService] method; all proxy work runs on one model
thread, so the batched forwards and the streams never use the proxy at the same time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from halluprobe.serving.schemas import DetectorCard, ItemError, ItemScore, ScoreItem, SpanOut, StreamEvent

if TYPE_CHECKING:
    from halluprobe.detectors._detector import Detector, Prediction
    from halluprobe.detectors._prediction import PendingPrediction
    from halluprobe.detectors._streaming import Follower, StreamUpdate

V = TypeVar("V")


class ScoringService:
    """A loaded detector ready to score requests.

    Args:
        detector: The [`Detector`][halluprobe.Detector] to serve (its proxy is loaded here).
        device: Torch device of the proxy (None: the detector's default).
        max_tokens: Most tokens of one formatted example (context, question and answer); a longer one
            gets a ``too_long`` error of its own. None: the proxy's position limit.
    """

    def __init__(self, detector: Detector, *, device: str | None = None, max_tokens: int | None = None):
        self.detector, self.device, self.max_tokens = detector, device, max_tokens
        self.extractor = detector.extractor(device)
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="halluprobe-proxy")
        """The one thread that runs the proxy (batched forwards and streams alike)."""

    def on_model_thread(self, fn: Callable[..., V], *args: Any) -> Any:
        """A future of ``fn(*args)`` run on `model_thread`."""
        return self.model_thread.submit(fn, *args)

    def _check(self, i: int, item: ScoreItem) -> ItemError | list[int]:
        """The item's answer token ids, or its error when it is empty or longer than the server reads."""
        if not item.answer.strip():
            return ItemError(error="empty_answer", message=f"item {i}: the answer is empty")
        try:
            ids, start = self.extractor.encode(_Item(f"item {i}", item.context, item.question, item.answer))
        except ValueError as exc:
            return ItemError(error="too_long", message=str(exc).splitlines()[0])
        except Exception as exc:  # noqa: BLE001 - text the tokenizer cannot take fails this item alone
            return ItemError(
                error="failed", message=f"item {i}: could not be tokenised ({type(exc).__name__})"
            )
        if self.max_tokens is not None and len(ids) > self.max_tokens:
            return ItemError(
                error="too_long",
                message=f"item {i}: {len(ids)} tokens; this server reads at most {self.max_tokens} per "
                "example",
            )
        return ids[start:]

    def score(
        self, items: list[ScoreItem], threshold: float | str | None = None
    ) -> list[ItemScore | ItemError]:
        """Score ``items`` in one batched proxy forward (those that fit); one result per item, in order.

        An item that is too long or empty gets an [`ItemError`][halluprobe.serving.schemas.ItemError];
        the others are scored as [`Detector.predict_batch`][halluprobe.Detector.predict_batch] scores
        them (higher = more likely hallucinated), labelled at ``threshold`` as it takes it.
        """
        return self.finish(self.score_pending(items), threshold)

    def score_pending(
        self, items: Sequence[ScoreItem], indices: Sequence[int] | None = None
    ) -> list[PendingScore | ItemError]:
        """`score` before the threshold: what the batch queue runs (its batches mix requests).

        ``indices``: each item's place in its own request, for the messages (default: its place here).
        One item that fails does not fail the others: when the batched forward raises, each item is
        scored alone, and the one that still fails gets a ``failed`` error of its own.
        """
        where = list(range(len(items))) if indices is None else list(indices)
        checked = [self._check(i, it) for i, it in zip(where, items, strict=True)]
        todo = [k for k, c in enumerate(checked) if not isinstance(c, ItemError)]
        try:
            scored: list[PendingScore | ItemError] = self._pending(
                [items[k] for k in todo], [checked[k] for k in todo]
            )
        except Exception:  # noqa: BLE001 - isolate the item that fails
            scored = [self._one(items[k], checked[k], where[k]) for k in todo]
        done = iter(scored)
        return [c if isinstance(c, ItemError) else next(done) for c in checked]

    def _pending(self, items: list[ScoreItem], ids: list[Any]) -> list[PendingScore | ItemError]:
        from halluprobe.detectors._prediction import pending_triples
        from halluprobe.features._token_data import token_offsets

        triples = [(it.context, it.question, it.answer) for it in items]
        scored = pending_triples(self.detector, triples, device=self.device, batch_size=max(1, len(triples)))
        return [
            PendingScore(p, it.answer, token_offsets(self.extractor.tokenizer, it.answer, answer_ids))
            for p, it, answer_ids in zip(scored, items, ids, strict=True)
        ]

    def _one(self, item: ScoreItem, ids: Any, i: int) -> PendingScore | ItemError:
        try:
            return self._pending([item], [ids])[0]
        except Exception as exc:  # noqa: BLE001 - reported on this item alone
            first = (str(exc).splitlines() or [""])[0][:200]
            return ItemError(
                error="failed", message=f"item {i}: could not be scored ({type(exc).__name__}: {first})"
            )

    def finish(
        self, results: list[PendingScore | ItemError], threshold: float | str | None = None
    ) -> list[ItemScore | ItemError]:
        """The response of one request's results, labelled at ``threshold``.

        ``threshold``: None, the detector's; a number in [0, 1]; or ``"expected-f1"``, from the scored
        items' own probabilities (at least 20 of them; `halluprobe.expected_f1_threshold`).

        Raises:
            ValueError: another ``threshold``, or ``"expected-f1"`` with fewer than 20 scored items.
        """
        from halluprobe._threshold import check_threshold
        from halluprobe.detectors._prediction import resolve_threshold

        scored = [r.pending for r in results if isinstance(r, PendingScore)]
        check_threshold(threshold, len(scored))
        t = resolve_threshold(threshold, self.detector.probe_.threshold, scored)
        return [
            r if isinstance(r, ItemError) else item_score(r.pending.at(t), r.answer, r.offsets)
            for r in results
        ]

    def card(self) -> DetectorCard:
        """The detector's card: proxy, feature set, threshold, training data, what is read."""
        det = self.detector
        extra = getattr(det, "card", None)  # a packaged detector may describe its training data
        training = extra.get("training_data") if isinstance(extra, dict) else None
        reads = getattr(self.extractor, "reads", None)
        return DetectorCard(
            source=None if det.source is None else Path(det.source).name,  # never the server's paths
            proxy=det.proxy or "SmolLM2-135M-Instruct (the default proxy)",
            feature_set=det.probe_.feature_set,
            threshold=float(det.probe_.threshold),
            val_auroc=float(det.probe_.val_auroc) if np.isfinite(det.probe_.val_auroc) else None,
            training_data=None if training is None else str(training),
            layers=None if det.layers is None else list(det.layers),
            hidden_layers=list(det.hidden_layers_),
            spans="token_probe" if det.token_probe_ is not None else "token_scores",
            reads={} if reads is None else reads.describe(),
        )

    def follow(self, context: str, question: str) -> Follower:
        """A `Follower` of an answer arriving in chunks (model thread)."""
        from halluprobe.detectors._streaming import StreamingScorer

        return StreamingScorer(self.detector, device=self.device).follow(context, question)

    def close(self) -> None:
        """Stop the model thread once its work is done."""
        self.model_thread.shutdown(wait=True)


def item_score(pred: Prediction, answer: str, offsets: np.ndarray) -> ItemScore:
    """The response model of one prediction, each span with its confidence.

    Args:
        pred: The prediction.
        answer: Its answer text.
        offsets: ``[A, 2]`` character offsets of the answer tokens in ``answer``.
    """
    return ItemScore(
        probability=float(pred.probability),
        label=int(pred.label),
        threshold=float(pred.threshold),
        spans=[
            SpanOut(
                start=s.start,
                end=s.end,
                text=answer[s.start : s.end],
                confidence=_confidence(s, pred, offsets),
            )
            for s in pred.spans
        ],
        answer_tokens=len(pred.tokens),
    )


def _confidence(span: Any, pred: Prediction, offsets: np.ndarray) -> float:
    """The span's own confidence when it has one, else the mean score of the tokens it overlaps."""
    own = getattr(span, "confidence", None)
    if isinstance(own, int | float) and np.isfinite(own):
        return float(own)
    inside = (offsets[:, 0] < span.end) & (offsets[:, 1] > span.start)
    scores = np.asarray(pred.token_scores)[inside]
    return float(scores.mean()) if scores.size else float(pred.probability)


def stream_event(update: StreamUpdate) -> StreamEvent:
    """The ``tokens`` event of one update (the keys of ``halluprobe stream --json``)."""
    return StreamEvent(
        event="tokens", tokens=list(update.tokens), token_ids=[int(t) for t in update.token_ids],
        token_scores=[float(x) for x in update.token_scores], probability=float(update.probability),
        answer_tokens=int(update.answer_tokens),
    )  # fmt: skip


@dataclass
class PendingScore:
    """One scored item before its threshold (`ScoringService.score_pending`)."""

    pending: PendingPrediction
    answer: str
    offsets: np.ndarray


class _Item:
    def __init__(self, id: str, context: str, question: str, answer: str) -> None:
        self.id, self.context, self.question, self.answer = id, context, question, answer
