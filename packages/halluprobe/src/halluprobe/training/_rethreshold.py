"""Re-choosing a fitted detector's threshold by a rule, its weights and calibration kept."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from halluprobe.training._calibration import transfer_threshold
from halluprobe.training._thresholds import check_threshold_rule, rule_selection

__all__ = ["rethreshold"]


def rethreshold(
    detector: Any, probs: Mapping[str, np.ndarray], labels: Mapping[str, np.ndarray], rule: str
) -> Any:
    """A copy of ``detector`` whose threshold is chosen by ``rule`` on its own validation probabilities.

    The weights, calibration and features stay; only ``probe_.threshold`` changes, and the selection
    records the rule as a fit with ``threshold_rule=rule`` records it (``threshold_false_alarm_rate``
    for ``false-alarm@R``, absent otherwise). ``detector`` is left as it was.

    Args:
        detector: A fitted `halluprobe.Detector`.
        probs: source -> ``[n_s]`` this detector's probabilities of that source's validation answers.
        labels: source -> ``[n_s]`` their labels (1: hallucinated).
        rule: One of `halluprobe.training._thresholds.THRESHOLD_RULES` (as `transfer_threshold` reads them).

    Raises:
        ValueError: An unknown rule, a detector that is not fitted, or probabilities and labels that
            differ in their sources or lengths.
    """
    check_threshold_rule(rule)
    probe = getattr(detector, "probe_", None)
    if probe is None:
        raise ValueError("rethreshold needs a fitted detector (one with probe_)")
    if set(probs) != set(labels) or any(len(probs[s]) != len(labels[s]) for s in probs):
        raise ValueError("rethreshold needs one label per probability, for the same sources")
    out = copy.deepcopy(detector)
    out.probe_.threshold = float(transfer_threshold(probs, labels, rule))
    out.probe_.selection = rule_selection(out.probe_.selection, rule)
    return out
