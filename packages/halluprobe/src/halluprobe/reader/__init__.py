"""The fine-tuned reader: the proxy itself trained to flag unsupported answer tokens.

A frozen proxy's statistics plateau as features of whether a context supports an answer; a reader
instead adapts the proxy. Low-rank adapters (peft) on its attention and MLP projections and a token
head on its final hidden state are trained together on labelled answers: token-level where the data
marks hallucinated spans, example-level through the pooled token score where it only labels answers,
every source weighted the same. Early stopping, the pooling, the overlap anchor, the calibration, the
threshold and the span decoding are chosen on validation answers only.

A fitted reader is a detector like any other: [`halluprobe.load`][] reads its folder, and
``halluprobe predict``, ``stream`` and ``serve`` score with it. Scores: higher means more likely
hallucinated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.reader._data import ReaderRow, as_examples, encode_row, span_token_labels
    from halluprobe.reader._fitting import SkippedRowWarning
    from halluprobe.reader._model import ReaderHead, pool_logits
    from halluprobe.reader._reader import Reader
    from halluprobe.reader._settings import DEFAULT_TARGETS, POOLS, AdapterSpec, ReaderSettings
    from halluprobe.reader._train import ReaderFit, fit_reader

# imported on first use: ``halluprobe finetune --help`` needs no torch
_EXPORTS = {
    "_data": ("ReaderRow", "as_examples", "encode_row", "span_token_labels"),
    "_fitting": ("SkippedRowWarning",),
    "_model": ("ReaderHead", "pool_logits"),
    "_reader": ("Reader",),
    "_settings": ("DEFAULT_TARGETS", "POOLS", "AdapterSpec", "ReaderSettings"),
    "_train": ("ReaderFit", "fit_reader"),
}

__all__ = [
    "DEFAULT_TARGETS",
    "POOLS",
    "AdapterSpec",
    "Reader",
    "ReaderFit",
    "ReaderHead",
    "ReaderRow",
    "ReaderSettings",
    "SkippedRowWarning",
    "as_examples",
    "encode_row",
    "fit_reader",
    "pool_logits",
    "span_token_labels",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS)
