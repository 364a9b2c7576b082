"""Thresholds besides the mean-F1 search: the rule names, the false-alarm rule, the batch rule.

`halluprobe.training.transfer_threshold` applies them; a reader (`halluprobe.reader`) and
``halluprobe transfer --threshold`` name them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "THRESHOLD_RULES",
    "batch_threshold",
    "check_threshold_rule",
    "expected_f1_threshold",
    "false_alarm_threshold",
    "rule_selection",
]

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


def expected_f1_threshold(probs: np.ndarray) -> float:
    """The threshold that maximises the expected F1 of a batch of calibrated probabilities; no labels.

    If answer ``i`` is hallucinated with probability ``p_i``, flagging the ``k`` most probable answers
    has expected true positives ``sum of their p`` and expected positives ``sum(p)``, so its F1 is about
    ``2 * sum_top_k(p) / (k + sum(p))`` (the ratio of the expectations). The best ``k`` gives the
    threshold: the ``k``-th largest probability (answers tied with it are flagged too). For calibrated
    probabilities the F1-optimal threshold is half the best F1 reachable, and that F1 depends on the
    base rate: this threshold follows the batch's own base rate, which a fixed threshold cannot (lower
    where few answers are likely hallucinated, higher where many are). It is only as good as the
    calibration on the batch's source, and it treats the batch as one population (score one source at a
    time).

    Args:
        probs: ``[n]`` calibrated probabilities of being hallucinated, ``n >= 1``.

    Returns:
        The threshold; above every probability (nothing flagged) when they are all 0.

    Raises:
        ValueError: empty or non-1-D input, or probabilities outside [0, 1].
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"expected_f1_threshold needs a non-empty 1-D array of probabilities, got {p.shape}")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("expected_f1_threshold needs probabilities in [0, 1]")
    total = p.sum()
    if total <= 0:
        return float(np.nextafter(p.max(), np.inf))
    desc = np.sort(p)[::-1]
    expected = 2 * np.cumsum(desc) / (np.arange(1, p.size + 1) + total)  # [n]: flag the top k = 1..n
    return float(desc[int(np.argmax(expected))])


def rule_selection(selection: Mapping[str, float], rule: str) -> dict[str, float]:
    """``selection`` recording the threshold ``rule`` as a general fit's selection records it.

    ``false-alarm@R`` adds ``threshold_false_alarm_rate`` (last); the other rules leave no such key.
    """
    out = {k: float(v) for k, v in selection.items() if k != "threshold_false_alarm_rate"}
    head, _, rate = check_threshold_rule(rule).partition("@")
    if head == "false-alarm":
        out["threshold_false_alarm_rate"] = float(rate)
    return out


def batch_threshold(probs: Any, default: float) -> float:
    """The threshold that ``"expected-f1"`` labels a batch at.

    `halluprobe.expected_f1_threshold` of the batch's probabilities, or ``default`` (the detector's own)
    when the batch gives no evidence of a hallucination.

    Expected F1 rewards flagging: when every answer is unlikely to be hallucinated, flagging them all
    still has the best expected F1 (a small precision beats a zero recall), so a batch of answers the
    detector calls supported would come back all hallucinated. The batch rule may move the threshold
    only where the batch holds evidence of positives: at least one answer at or above ``default``.
    With none, the batch's labels are the detector's (every answer supported).

    Args:
        probs: ``[n]`` calibrated probabilities of being hallucinated, ``n >= 1``.
        default: The detector's threshold.
    """
    p = np.asarray(probs, dtype=np.float64)
    t = expected_f1_threshold(p)
    return float(default) if not (p >= default).any() else t
