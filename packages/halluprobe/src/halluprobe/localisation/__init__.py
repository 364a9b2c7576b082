"""Localisation: a token probe, span decoding and the character-level span metric.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.localisation._localisation import (
        TaskTokenProbes,
        TokenProbe,
        fit_and_evaluate,
        fit_token_probe,
        fit_token_probe_cv,
    )
    from halluprobe.localisation._spans import (
        SpanResult,
        choose_decoding,
        decode_spans,
        evaluate_spans,
        span_counts,
        span_prf,
    )
    from halluprobe.localisation._verdict_spans import whole_words

_EXPORTS = {
    "_localisation": (
        "TaskTokenProbes",
        "TokenProbe",
        "fit_and_evaluate",
        "fit_token_probe",
        "fit_token_probe_cv",
    ),
    "_spans": ("SpanResult", "choose_decoding", "decode_spans", "evaluate_spans", "span_counts", "span_prf"),
    "_verdict_spans": ("whole_words",),
}

__all__ = [
    "SpanResult",
    "TaskTokenProbes",
    "TokenProbe",
    "choose_decoding",
    "decode_spans",
    "evaluate_spans",
    "fit_and_evaluate",
    "fit_token_probe",
    "fit_token_probe_cv",
    "span_counts",
    "span_prf",
    "whole_words",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS, legacy="_localisation")
