"""Threshold rules beside the mean-F1 one: their names, and the false-alarm rule.

`halluprobe.training.transfer_threshold` applies them; a reader (`halluprobe.reader`) and
``halluprobe transfer --threshold`` name them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["THRESHOLD_RULES", "check_threshold_rule", "false_alarm_threshold"]

THRESHOLD_RULES = ("mean-f1", "calibrated-0.5", "false-alarm@R")
"""Threshold rules of `transfer_threshold` (``R``: a false-alarm rate in [0, 1], e.g. ``false-alarm@0.2``)."""


def check_threshold_rule(rule: str) -> str:
    """``rule`` when it is one of `THRESHOLD_RULES`, else a ValueError naming them."""
    if rule in ("mean-f1", "calibrated-0.5"):
        return rule
    head, at, rate = str(rule).partition("@")
    try:
        ok = head == "false-alarm" and at == "@" and 0.0 <= float(rate) <= 1.0
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"threshold rule must be one of {THRESHOLD_RULES} (R in [0, 1]), got {rule!r}")
    return rule


def false_alarm_threshold(
    probs: Mapping[str, np.ndarray], labels: Mapping[str, np.ndarray], rate: float
) -> float:
    """The lowest threshold whose mean false-alarm rate over the sources stays at most ``rate``.

    The false-alarm rate of a source is the share of its supported answers with probability at or
    above the threshold; sources without supported answers are left out. Candidates are the validation
    probabilities (and 1), so the lowest one that qualifies keeps every hallucinated answer it can.

    Raises:
        ValueError: ``rate`` outside [0, 1], or no source has a supported answer.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"the false-alarm rate must lie in [0, 1], got {rate}")
    neg = [np.asarray(probs[s], np.float64)[np.asarray(labels[s]) == 0] for s in probs]
    neg = [n for n in neg if n.size]
    if not neg:
        raise ValueError("a false-alarm threshold needs supported validation answers")
    cands = np.unique(np.concatenate([*(np.asarray(p, np.float64) for p in probs.values()), [1.0]]))
    for t in cands:  # ascending: the first that keeps the mean rate within bounds
        if np.mean([np.mean(n >= t) for n in neg]) <= rate + 1e-12:
            return float(t)
    return 1.0
