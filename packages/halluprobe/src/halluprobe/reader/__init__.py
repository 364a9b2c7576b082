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

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from halluprobe.reader._data import ReaderExample, ReaderRow, as_examples, encode_row, span_token_labels
    from halluprobe.reader._fitting import SkippedRowWarning
    from halluprobe.reader._model import ReaderHead, pool_logits
    from halluprobe.reader._reader import Reader
    from halluprobe.reader._settings import DEFAULT_TARGETS, POOLS, AdapterSpec, ReaderSettings
    from halluprobe.reader._train import ReaderFit, fit_reader

_EXPORTS = {
    "ReaderRow": "_data", "encode_row": "_data", "span_token_labels": "_data",
    "ReaderExample": "_data", "SkippedRowWarning": "_fitting", "as_examples": "_data",
    "ReaderHead": "_model", "pool_logits": "_model",
    "DEFAULT_TARGETS": "_settings", "POOLS": "_settings", "AdapterSpec": "_settings",
    "ReaderSettings": "_settings",
    "Reader": "_reader", "ReaderFit": "_train", "fit_reader": "_train",
}  # fmt: skip
"""Public name -> the module that defines it (imported on first use: ``--help`` needs no torch)."""

__all__ = [
    "DEFAULT_TARGETS",
    "POOLS",
    "AdapterSpec",
    "Reader",
    "ReaderExample",
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


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"halluprobe.reader.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'halluprobe.reader' has no attribute {name!r}")
