"""Training: the probe protocol (C, heads and sinks chosen on validation), calibration, the general recipe.

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
}

__all__ = [
    "CS",
    "ProbeFit",
    "fit_blocks",
    "make_blocks",
    "select_heads",
    "select_sink_count",
    "train_feature_sets",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS)
