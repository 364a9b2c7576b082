"""Compact hallucination detectors on proxy-model attention statistics, hidden states and logits.

Scores everywhere: higher means more likely hallucinated; labels: 1 = hallucinated.

Public names are imported lazily, so ``import halluprobe`` (and ``halluprobe --help``) does not
import torch or scikit-learn until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.blocks import (
        A7Block,
        A64Block,
        CBlock,
        GBlock,
        H64Block,
        L9Block,
        Selection,
        induction_scores,
        parse_feature_set,
        rank_heads,
        select_a7,
        select_l9,
    )
    from halluprobe.detectors import (
        INTRYGUE,
        RAUQ,
        TOHA,
        Detector,
        LLMCheckAttention,
        LookbackLens,
        LookbackLensHeads,
        Prediction,
        SinkProbe,
        SinkRate,
        StreamingScorer,
        StreamUpdate,
        mtopdiv,
    )
    from halluprobe.detectors._default import load
    from halluprobe.features import (
        ExampleRecord,
        FeatureCache,
        ProxyExtractor,
        World,
        extract_records,
        init_world,
        plan_batches,
        reduce_forward,
        shard_batches,
    )
    from halluprobe.features._grounding import fill_grounding
    from halluprobe.localisation._verdict_spans import PredictedSpan
    from halluprobe.pipeline._general import GeneralFit, fit_general, train_general
    from halluprobe.pipeline._train import train
    from halluprobe.reader import Reader
    from halluprobe.training import ProbeFit, fit_blocks, select_heads, select_sink_count, train_feature_sets
    from halluprobe.training._calibration import Calibrator, DegenerateFitWarning, expected_f1_threshold

__version__ = "0.1.0"

# the flat module paths of 0.1 (``halluprobe.extract``, ...) still import, with a DeprecationWarning
_lazy.install_moved_modules()

_EXPORTS = {
    "A7Block": "blocks",
    "A64Block": "blocks",
    "H64Block": "blocks",
    "L9Block": "blocks",
    "GBlock": "blocks",
    "CBlock": "blocks",
    "parse_feature_set": "blocks",
    "Calibrator": "training._calibration",
    "DegenerateFitWarning": "training._calibration",
    "expected_f1_threshold": "training._calibration",
    "GeneralFit": "pipeline._general",
    "fit_general": "pipeline._general",
    "train_general": "pipeline._general",
    "train": "pipeline._train",
    "load": "detectors._default",
    "fill_grounding": "features._grounding",
    "PredictedSpan": "localisation._verdict_spans",
    "Reader": "reader",
    "FeatureCache": "features",
    "Detector": "detectors",
    "Prediction": "detectors",
    "INTRYGUE": "detectors",
    "RAUQ": "detectors",
    "TOHA": "detectors",
    "LLMCheckAttention": "detectors",
    "LookbackLens": "detectors",
    "LookbackLensHeads": "detectors",
    "SinkProbe": "detectors",
    "SinkRate": "detectors",
    "mtopdiv": "detectors",
    "ProxyExtractor": "features",
    "extract_records": "features",
    "plan_batches": "features",
    "World": "features",
    "init_world": "features",
    "shard_batches": "features",
    "induction_scores": "blocks",
    "rank_heads": "blocks",
    "ProbeFit": "training",
    "fit_blocks": "training",
    "select_heads": "training",
    "select_sink_count": "training",
    "train_feature_sets": "training",
    "ExampleRecord": "features",
    "reduce_forward": "features",
    "Selection": "blocks",
    "select_a7": "blocks",
    "select_l9": "blocks",
    "StreamingScorer": "detectors",
    "StreamUpdate": "detectors",
}

__all__ = [
    "A64Block",
    "A7Block",
    "CBlock",
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
    "Reader",
    "Selection",
    "SinkProbe",
    "SinkRate",
    "StreamUpdate",
    "StreamingScorer",
    "TOHA",
    "World",
    "expected_f1_threshold",
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
    "train",
    "train_feature_sets",
    "train_general",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"halluprobe.{_EXPORTS[name]}"), name)
    if f"halluprobe.{name}" in _lazy.MOVED_MODULES:
        return importlib.import_module(f"halluprobe.{name}")
    raise AttributeError(f"module 'halluprobe' has no attribute {name!r}")
