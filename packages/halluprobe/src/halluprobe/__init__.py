"""Compact hallucination detectors on proxy-model attention statistics, hidden states and logits.

Scores everywhere: higher means more likely hallucinated; labels: 1 = hallucinated.

Public names are imported lazily, so ``import halluprobe`` (and ``halluprobe --help``) does not
import torch or scikit-learn until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from halluprobe.blocks import A7Block, A64Block, GBlock, H64Block, L9Block, parse_feature_set
    from halluprobe.cache import FeatureCache
    from halluprobe.calibration import Calibrator, DegenerateFitWarning
    from halluprobe.default_detector import load
    from halluprobe.detector import Detector, Prediction
    from halluprobe.detectors import (
        INTRYGUE,
        RAUQ,
        TOHA,
        LLMCheckAttention,
        LookbackLens,
        LookbackLensHeads,
        SinkProbe,
        SinkRate,
        mtopdiv,
    )
    from halluprobe.distributed import World, init_world, shard_batches
    from halluprobe.extract import ProxyExtractor, extract_records, plan_batches
    from halluprobe.general import GeneralFit, fit_general, train_general
    from halluprobe.grounding import fill_grounding
    from halluprobe.induction import induction_scores, rank_heads
    from halluprobe.protocol import ProbeFit, fit_blocks, select_heads, select_sink_count, train_feature_sets
    from halluprobe.records import ExampleRecord, reduce_forward
    from halluprobe.selection import Selection, select_a7, select_l9
    from halluprobe.streaming import StreamingScorer, StreamUpdate
    from halluprobe.verdict_spans import PredictedSpan

__version__ = "0.1.0"

_EXPORTS = {
    "A7Block": "blocks",
    "A64Block": "blocks",
    "H64Block": "blocks",
    "L9Block": "blocks",
    "GBlock": "blocks",
    "parse_feature_set": "blocks",
    "FeatureCache": "cache",
    "Calibrator": "calibration",
    "DegenerateFitWarning": "calibration",
    "load": "default_detector",
    "Detector": "detector",
    "Prediction": "detector",
    "INTRYGUE": "detectors",
    "RAUQ": "detectors",
    "TOHA": "detectors",
    "LLMCheckAttention": "detectors",
    "LookbackLens": "detectors",
    "LookbackLensHeads": "detectors",
    "SinkProbe": "detectors",
    "SinkRate": "detectors",
    "mtopdiv": "detectors",
    "ProxyExtractor": "extract",
    "extract_records": "extract",
    "plan_batches": "extract",
    "GeneralFit": "general",
    "fit_general": "general",
    "train_general": "general",
    "fill_grounding": "grounding",
    "PredictedSpan": "verdict_spans",
    "World": "distributed",
    "init_world": "distributed",
    "shard_batches": "distributed",
    "induction_scores": "induction",
    "rank_heads": "induction",
    "ProbeFit": "protocol",
    "fit_blocks": "protocol",
    "select_heads": "protocol",
    "select_sink_count": "protocol",
    "train_feature_sets": "protocol",
    "ExampleRecord": "records",
    "reduce_forward": "records",
    "Selection": "selection",
    "select_a7": "selection",
    "select_l9": "selection",
    "StreamingScorer": "streaming",
    "StreamUpdate": "streaming",
}

__all__ = [
    "A64Block",
    "A7Block",
    "Calibrator",
    "DegenerateFitWarning",
    "Detector",
    "ExampleRecord",
    "FeatureCache",
    "GBlock",
    "GeneralFit",
    "H64Block",
    "INTRYGUE",
    "L9Block",
    "LLMCheckAttention",
    "LookbackLens",
    "LookbackLensHeads",
    "PredictedSpan",
    "Prediction",
    "ProbeFit",
    "ProxyExtractor",
    "RAUQ",
    "Selection",
    "SinkProbe",
    "SinkRate",
    "StreamUpdate",
    "StreamingScorer",
    "TOHA",
    "World",
    "extract_records",
    "fill_grounding",
    "fit_blocks",
    "fit_general",
    "induction_scores",
    "init_world",
    "load",
    "mtopdiv",
    "parse_feature_set",
    "plan_batches",
    "rank_heads",
    "reduce_forward",
    "select_a7",
    "select_heads",
    "select_l9",
    "select_sink_count",
    "shard_batches",
    "train_feature_sets",
    "train_general",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"halluprobe.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'halluprobe' has no attribute {name!r}")
