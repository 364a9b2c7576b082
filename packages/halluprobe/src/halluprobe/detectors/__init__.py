"""Detectors: a trained `Detector` (saved, loaded, scoring text), the published ones, streaming scoring.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.detectors._detector import Detector, Prediction
    from halluprobe.detectors._published import (
        INTRYGUE,
        RAUQ,
        TOHA,
        LLMCheckAttention,
        LookbackLens,
        LookbackLensHeads,
        SinkProbe,
        SinkRate,
    )
    from halluprobe.detectors._published_fit import fit_published, published_scores
    from halluprobe.detectors._published_inputs import mtopdiv
    from halluprobe.detectors._streaming import Follower, StreamingScorer, StreamUpdate, stream_text_chunks

_EXPORTS = {
    "_detector": ("Detector", "Prediction"),
    "_published": (
        "INTRYGUE",
        "RAUQ",
        "TOHA",
        "LLMCheckAttention",
        "LookbackLens",
        "LookbackLensHeads",
        "SinkProbe",
        "SinkRate",
    ),
    "_published_fit": ("fit_published", "published_scores"),
    "_published_inputs": ("mtopdiv",),
    "_streaming": ("Follower", "StreamUpdate", "StreamingScorer", "stream_text_chunks"),
}

__all__ = [
    "Detector",
    "Follower",
    "INTRYGUE",
    "LLMCheckAttention",
    "LookbackLens",
    "LookbackLensHeads",
    "Prediction",
    "RAUQ",
    "SinkProbe",
    "SinkRate",
    "StreamUpdate",
    "StreamingScorer",
    "TOHA",
    "fit_published",
    "mtopdiv",
    "published_scores",
    "stream_text_chunks",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS, legacy="_published")
