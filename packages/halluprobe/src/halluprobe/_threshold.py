"""The threshold a user can ask for, as text (CLI flag, HTTP query) or as a value; no heavy imports."""

from __future__ import annotations

from typing import Any

__all__ = ["EXPECTED_F1", "MIN_BATCH_FOR_THRESHOLD", "batch_threshold", "check_threshold", "parse_threshold"]

EXPECTED_F1 = "expected-f1"
"""The batch threshold: the one maximising the batch's expected F1 (`halluprobe.expected_f1_threshold`)."""

MIN_BATCH_FOR_THRESHOLD = 20
"""Fewest answers the batch threshold accepts: it is estimated from the batch's probabilities, and a few
answers say little about a source's base rate."""


def parse_threshold(value: str | None) -> float | str | None:
    """``value`` as text (None, a probability, or ``"expected-f1"``) as `check_threshold` takes it.

    Raises:
        ValueError: naming what is expected, for any other text.
    """
    if value is None or value == EXPECTED_F1:
        return value
    try:
        t = float(value)
    except ValueError:
        t = float("nan")
    if not 0 <= t <= 1:
        raise ValueError(f"threshold must be a probability in [0, 1] or {EXPECTED_F1}, got {value!r}")
    return t


def check_threshold(threshold: Any, n: int) -> None:
    """Refuse a ``threshold`` that cannot label ``n`` answers.

    Raises:
        ValueError: naming what is expected unless ``threshold`` is None, a number in [0, 1], or
            ``"expected-f1"`` with at least `MIN_BATCH_FOR_THRESHOLD` answers.
    """
    if threshold is None:
        return
    if threshold == EXPECTED_F1:
        if n < MIN_BATCH_FOR_THRESHOLD:
            raise ValueError(
                f"threshold='{EXPECTED_F1}' estimates the threshold from the batch itself: it needs at least "
                f"{MIN_BATCH_FOR_THRESHOLD} answers of one source, got {n}"
            )
        return
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise ValueError(
            f"threshold must be None (the detector's), a number in [0, 1] or '{EXPECTED_F1}', "
            f"got {threshold!r}"
        )


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
    import numpy as np

    from halluprobe.training._calibration import expected_f1_threshold

    p = np.asarray(probs, dtype=np.float64)
    t = expected_f1_threshold(p)
    return float(default) if not (p >= default).any() else t
