"""Training: one call (`train`), the probe protocol (C, heads and sinks chosen on validation), the CLI run.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.training._protocol import (
        CS,
        ProbeFit,
        fit_blocks,
        make_blocks,
        select_heads,
        select_sink_count,
        train_feature_sets,
    )
    from halluprobe.training._train import train
    from halluprobe.training._training import fit_published, run_training

_EXPORTS = {
    "_protocol": (
        "CS",
        "ProbeFit",
        "fit_blocks",
        "make_blocks",
        "select_heads",
        "select_sink_count",
        "train_feature_sets",
    ),
    "_train": ("train",),
    "_training": ("fit_published", "run_training"),
}

__all__ = [
    "CS",
    "ProbeFit",
    "fit_blocks",
    "fit_published",
    "make_blocks",
    "run_training",
    "select_heads",
    "select_sink_count",
    "train",
    "train_feature_sets",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS, legacy="_training")
