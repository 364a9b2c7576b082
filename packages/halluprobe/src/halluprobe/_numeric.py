"""Small numeric helpers shared by the probes, detectors and the saved detector."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["sigmoid"]


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    """The logistic function ``1 / (1 + exp(-x))``, without overflow for large ``|x|``.

    Args:
        x: logits, any shape (float64 recommended).

    Returns:
        Probabilities of the same shape, in ``[0, 1]`` (``scipy.special.expit``).
    """
    return expit(np.asarray(x, dtype=np.float64))
