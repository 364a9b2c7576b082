"""`Reader`: the fine-tuned reader as a scikit-learn classifier and a detector (predict, spans, save/load)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from halluprobe.reader._data import ReaderRow

__all__ = ["Reader"]


class Reader(ClassifierMixin, BaseEstimator):
    """A proxy fine-tuned to read: low-rank adapters and a token head that flags unsupported answer tokens.

    Scores: higher means more likely hallucinated; labels: 1 = hallucinated, 0 = supported. Where a
    frozen-proxy [`Detector`][halluprobe.Detector] probes statistics of a fixed model, a reader trains the
    proxy itself (`halluprobe.reader` has the recipe): its token head gives every answer token's logit of
    being unsupported, their pooling the answer's score, a Platt calibration its probability.

    ``X`` is a sequence of examples: `halubench_data.Example` (their ``spans``, ``source`` and ``split``
    are used), mappings with ``"context"``, ``"answer"`` and optional ``"question"``, ``"spans"``,
    ``"source"``, or ``(context, question, answer)`` triples.

    Args:
        proxy: Proxy id for [`flashstats_hf.load_model`][] (None: the default SmolLM2).
        rank: Adapter rank (this and the parameters down to ``seed`` are the fine-tuning's
            `halluprobe.reader.ReaderSettings`).
        alpha: Adapter alpha.
        dropout: Dropout on the adapters' input.
        learning_rate: Learning rate of the adapters.
        head_learning_rate: Learning rate of the token head.
        epochs: Most passes over the training answers.
        max_batch_tokens: Most padded tokens per batch.
        pool: Pooling of the example loss (``max``, ``noisy-or``, ``mean``).
        token_weight: Weight of the token loss.
        evals_per_epoch: Validation passes per epoch.
        patience: Passes without improvement before training stops.
        seed: Seed of the fine-tuning and of the validation split.
        anchor: Mix the zero-fit overlap score in, its weight chosen on validation (``w = 1`` allowed).
        threshold_rule: ``"false-alarm@R"`` (the lowest threshold whose mean validation false-alarm
            rate over sources is at most ``R``), ``"mean-f1"`` or ``"calibrated-0.5"``
            (`halluprobe.training.transfer_threshold`).
        validation_fraction: Share held out for validation when the examples have no validation split.
        device: Torch device (None: CUDA when available).
        progress: Show a progress bar with the loss and tokens per second while fitting.

    Attributes:
        adapter_ (dict[str, torch.Tensor]): The adapters (float16 on disk and in memory alike).
        head_ (dict[str, torch.Tensor]): The token head.
        scoring_ (ReaderScoring): Pooling, anchor, calibration, threshold and span decoding.
        card_ (dict): Proxy identity, sources, steps, settings, validation metrics.
        classes_ (numpy.ndarray): ``[0, 1]``.
        source (pathlib.Path | None): The folder it was loaded from.
    """

    source: Path | None = None

    def __init__(
        self,
        proxy: str | None = None,
        *,
        rank: int = 8,
        alpha: int = 16,
        dropout: float = 0.05,
        learning_rate: float = 4e-4,
        head_learning_rate: float = 1e-3,
        epochs: float = 2.0,
        max_batch_tokens: int = 16384,
        pool: str = "max",
        token_weight: float = 1.0,
        evals_per_epoch: int = 2,
        patience: int = 2,
        seed: int = 0,
        anchor: bool = False,
        threshold_rule: str = "false-alarm@0.2",
        validation_fraction: float = 0.25,
        device: str | None = None,
        progress: bool = False,
    ):
        self.proxy = proxy
        self.rank = rank
        self.alpha = alpha
        self.dropout = dropout
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate
        self.epochs = epochs
        self.max_batch_tokens = max_batch_tokens
        self.pool = pool
        self.token_weight = token_weight
        self.evals_per_epoch = evals_per_epoch
        self.patience = patience
        self.seed = seed
        self.anchor = anchor
        self.threshold_rule = threshold_rule
        self.validation_fraction = validation_fraction
        self.device = device
        self.progress = progress

    # ---- fitting -------------------------------------------------------------------------------

    def settings(self):
        """The fine-tuning's `halluprobe.reader.ReaderSettings` from this estimator's parameters."""
        from halluprobe.reader._train import ReaderSettings

        return ReaderSettings(
            rank=int(self.rank), alpha=int(self.alpha), dropout=float(self.dropout),
            learning_rate=float(self.learning_rate), head_learning_rate=float(self.head_learning_rate),
            epochs=float(self.epochs), max_batch_tokens=int(self.max_batch_tokens), pool=str(self.pool),
            token_weight=float(self.token_weight), evals_per_epoch=int(self.evals_per_epoch),
            patience=int(self.patience), seed=int(self.seed),
        )  # fmt: skip

    def fit(self, X: Any, y: Any = None, *, validation: Any = None, sources: Any = None) -> Reader:
        """Fine-tune on ``X`` (labels ``y``, or the examples' own); returns self.

        Args:
            X: Examples (class docstring); hallucinated ones with ``spans`` train the token head
                directly, the others through their pooled score.
            y: ``[n]`` labels (1 = hallucinated); None: each example's ``label``.
            validation: ``[n] bool``, True on the validation rows (early stopping, pooling, anchor,
                calibration, threshold and span decoding are chosen there, never on training rows);
                None: the examples' ``split == "validation"`` when they have one, else a stratified
                split of ``validation_fraction`` (seed ``seed``).
            sources: ``[n]`` source names (None: the examples' ``source``).

        Raises:
            ValueError: naming the row, for a row that cannot be used (no answer, a label other than 0 or
                1, spans outside the answer); or when a side of the split lacks a label.
        """
        from halluprobe.reader._fitting import fit_reader_estimator

        return fit_reader_estimator(self, X, y, validation, sources)

    # ---- the loaded model --------------------------------------------------------------------

    def extractor(self, device: str | None = None):
        """A `halluprobe.ProxyExtractor` over the adapted proxy (loads it on first use).

        Its ``encode`` formats and checks inputs as every path does; its model has the adapters merged
        in, so the attention statistics it records are the adapted reader's.
        """
        if getattr(self, "_extractor", None) is None:
            from halluprobe.reader._fitting import load_adapted

            self._extractor = load_adapted(self, device or self.device)
        return self._extractor

    def _model_head(self, device: str | None):
        from halluprobe.reader._model import ReaderHead

        ext = self.extractor(device)
        if getattr(self, "_head", None) is None:
            head = ReaderHead(int(ext.model.config.hidden_size))
            head.load_state_dict({k: v.float() for k, v in self.head_.items()})
            self._head = head.to(next(ext.model.parameters()).device).eval()
        return ext, self._head

    def token_logits(self, triples: Sequence[tuple[str, str, str]], *, device: str | None = None,
                     batch_size: int = 8) -> list[tuple[list[int], int, np.ndarray]]:  # fmt: skip
        """``(token ids, first answer token, [A] token logits)`` of each triple (input order).

        Raises:
            ValueError: a triple longer than the proxy's positions (naming it), or an empty answer.
        """
        from halluprobe.detectors._prediction import Item, check_triple
        from halluprobe.reader._train import score_rows

        ext, head = self._model_head(device)
        items = [Item(f"item{i}", *check_triple(i, t)) for i, t in enumerate(triples)]
        encoded = [ext.encode(it) for it in items]
        rows = [
            ReaderRow(it.id, "", np.asarray(ids), start, -1, None)
            for it, (ids, start) in zip(items, encoded, strict=True)
        ]
        dev = next(ext.model.parameters()).device
        out = score_rows(ext.model, head, rows, dev, int(self.max_batch_tokens), max_rows=batch_size)
        return [(ids, start, z) for (ids, start), z in zip(encoded, out, strict=True)]

    # ---- scikit-learn ------------------------------------------------------------------------

    def decision_function(self, X: Any) -> np.ndarray:
        """``[n] float64`` calibrated logits of the rows of ``X``; higher means more likely hallucinated."""
        from halluprobe.detectors._prediction import Item, as_items

        items = as_items(X)
        if not all(isinstance(it, Item) for it in items):
            raise ValueError("a reader scores texts: X must hold examples, mappings or triples, not records")
        triples = [(it.context, it.question, it.answer) for it in items if isinstance(it, Item)]
        z = [t[2] for t in self.token_logits(triples)]
        return self.scoring_.logit(self.scoring_.raw(z, triples))

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2] float64``: columns follow ``classes_`` (column 1 = hallucinated)."""
        from halluprobe._numeric import sigmoid

        p = sigmoid(self.decision_function(X))
        return np.stack([1.0 - p, p], 1)

    def predict(self, X: Any) -> np.ndarray:
        """``[n] int64`` labels: 1 where the probability reaches the threshold."""
        return (self.predict_proba(X)[:, 1] >= self.scoring_.threshold).astype(np.int64)

    # ---- the detector surface (predict, stream, serve) -----------------------------------------

    def pending_triples(
        self, triples: Sequence[tuple[str, str, str]], *, device: str | None, batch_size: int
    ):
        """Each triple scored, before its threshold is applied (`halluprobe.detectors._prediction`)."""
        from halluprobe.reader._fitting import pending

        return pending(self, triples, device=device, batch_size=batch_size)

    def predict_batch(self, triples: Sequence[tuple[str, str, str]], *, device: str | None = None,
                      batch_size: int = 8, threshold: float | str | None = None) -> list:  # fmt: skip
        """Score many ``(context, question, answer)`` triples (spans from the token head).

        As [`Detector.predict_batch`][halluprobe.Detector.predict_batch] does, with its arguments.
        """
        from halluprobe.detectors._prediction import predict_triples

        return predict_triples(self, triples, device=device, batch_size=batch_size, threshold=threshold)

    def predict_text(self, context: str, question: str, answer: str, *, device: str | None = None):
        """Score one triple; a [`Prediction`][halluprobe.Prediction] with spans from the token head."""
        return self.predict_batch([(context, question, answer)], device=device)[0]

    @property
    def probe_(self):
        """What the shared prediction and serving code read of a detector (threshold, name, metrics)."""
        from halluprobe.reader._fitting import ReaderProbe

        return ReaderProbe.of(self)

    token_probe_ = None
    uses_grounding = False
    uses_contrast = False
    layers = None

    @property
    def hidden_layers_(self) -> tuple[int, ...]:
        """The hidden state the token head reads: the decoder's final normed state."""
        return (int(self.card_["proxy"]["layers"]),)

    @property
    def _name(self) -> str:
        return str(self.source or "fine-tuned reader")

    def info(self) -> dict[str, Any]:
        """Kind, pooling, threshold and anchor, for display."""
        s = self.scoring_
        return {"kind": "reader", "pool": s.pool, "threshold": s.threshold,
                "anchor_weight": None if s.anchor is None else s.anchor.weight}  # fmt: skip

    def _streaming_type(self):
        from halluprobe.reader._stream import ReaderStreamingScorer

        return ReaderStreamingScorer

    # ---- files -------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the reader to ``path/detector.json`` and ``path/detector.safetensors`` (atomically)."""
        from halluprobe.reader._file import save_reader

        return save_reader(self, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> Reader:
        """Read a reader folder, checking its integrity hash and that its adapters fit its proxy."""
        from halluprobe.reader._file import load_reader

        return load_reader(cls, Path(path))
