"""The training pipeline: data → extraction → blocks → fit → calibration → threshold → save → report.

`run` walks the stages for a `TrainOptions` (``halluprobe train``, ``train --general`` and ``transfer``
build one from their flags); `FIT_STAGES` holds the fit stage of each kind of run. `train`,
`fit_general` and `train_general` are the same stages as Python calls.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.pipeline._fit import FIT_STAGES, FitStage, Fitted, Report
    from halluprobe.pipeline._general import GeneralFit, fit_general, train_general
    from halluprobe.pipeline._options import TrainOptions, TransferOptions, check_options
    from halluprobe.pipeline._report import run_training
    from halluprobe.pipeline._run import run
    from halluprobe.pipeline._train import train

_EXPORTS = {
    "_fit": ("FIT_STAGES", "FitStage", "Fitted", "Report"),
    "_general": ("GeneralFit", "fit_general", "train_general"),
    "_options": ("TrainOptions", "TransferOptions", "check_options"),
    "_report": ("run_training",),
    "_run": ("run",),
    "_train": ("train",),
}

__all__ = [
    "FIT_STAGES",
    "FitStage",
    "Fitted",
    "GeneralFit",
    "Report",
    "TrainOptions",
    "TransferOptions",
    "check_options",
    "fit_general",
    "run",
    "run_training",
    "train",
    "train_general",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS)
