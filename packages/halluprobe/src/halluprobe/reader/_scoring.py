"""From a reader's token logits to what a detector reports: answer score, calibration, anchor, spans.

A fitted reader scores an answer in four steps, each stored in its file:

1. token logits ``z: [A]`` from the adapted proxy's token head;
2. the reader score ``s = pool(z)`` (`halluprobe.reader._model.pool_logits`);
3. optionally anchored with the zero-fit overlap score ``o`` (`halubench_data.grounding.overlap_score`):
   ``m = (1 - w) * (o - mo) / so + w * (s - ms) / ss``, the means and scales taken on the validation
   answers (``w = 1`` is the reader alone);
4. a Platt calibration ``p = sigmoid(a * m + b)``, fitted on the validation answers, every source
   weighted the same.

The label is ``p >= threshold``. Spans are the answer characters of tokens with ``z >= span threshold``
(runs of at most ``gap`` unflagged tokens between flagged ones closed), shown only on a hallucinated
verdict. Higher always means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Anchor", "ReaderScoring", "choose_anchor"]

ANCHOR_WEIGHTS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Reader weights ``w`` an anchored reader tries (the overlap score weighs ``1 - w``)."""


@dataclass(frozen=True)
class Anchor:
    """The mix of the overlap score and the reader score (module docstring, step 3)."""

    weight: float
    """``w``: the reader's weight (1 = the reader alone)."""
    overlap: tuple[float, float]
    """``(mean, scale)`` of the overlap score on the validation answers."""
    reader: tuple[float, float]
    """``(mean, scale)`` of the reader score on the validation answers."""

    def __call__(self, reader: np.ndarray, overlap: np.ndarray) -> np.ndarray:
        """``[n]`` mixed scores of reader scores and overlap scores (both ``[n]``)."""
        o = (np.asarray(overlap, np.float64) - self.overlap[0]) / self.overlap[1]
        s = (np.asarray(reader, np.float64) - self.reader[0]) / self.reader[1]
        return (1.0 - self.weight) * o + self.weight * s


def _stats(x: np.ndarray) -> tuple[float, float]:
    sd = float(np.std(x))
    return float(np.mean(x)), (sd if sd > 1e-12 else 1.0)


def choose_anchor(
    reader: np.ndarray,
    overlap: np.ndarray,
    y: np.ndarray,
    sources: np.ndarray,
    weights: Sequence[float] = ANCHOR_WEIGHTS,
) -> Anchor:
    """The `Anchor` whose mixed validation score has the best mean per-source AUROC (ties: larger ``w``).

    Args:
        reader: ``[n]`` reader scores of the validation answers.
        overlap: ``[n]`` their overlap scores.
        y: ``[n]`` labels.
        sources: ``[n]`` source names.
        weights: Candidate reader weights.
    """
    from halluprobe.training._general import mean_source_auroc

    base = Anchor(1.0, _stats(overlap), _stats(reader))
    best, best_auc = base, -np.inf
    for w in sorted(weights):
        cand = Anchor(float(w), base.overlap, base.reader)
        auc = np.nan_to_num(mean_source_auroc(cand(reader, overlap), y, sources), nan=-1.0)
        if auc >= best_auc - 1e-12:
            best, best_auc = cand, auc
    return best


@dataclass(frozen=True)
class ReaderScoring:
    """Steps 2-4 of the module docstring and the span decoding: what turns token logits into a verdict."""

    pool: str
    """Pooling of token logits (`halluprobe.reader._model.POOLS`)."""
    calibration: tuple[float, float]
    """Platt ``(a, b)``: ``p = sigmoid(a * m + b)``."""
    threshold: float
    """Probability at or above which an answer is labelled hallucinated."""
    threshold_rule: str
    """How ``threshold`` was chosen (for the card)."""
    span_threshold: float
    """Token logit at or above which a token is flagged for spans."""
    span_gap: int
    """Unflagged runs of at most this many tokens between flagged ones are flagged too."""
    anchor: Anchor | None = None
    """The overlap mix, or None (the reader alone)."""

    def raw(self, z: Sequence[np.ndarray], texts: Sequence[tuple[str, str, str]] | None) -> np.ndarray:
        """``[n]`` scores before calibration (steps 2-3) of token logits and, when anchored, texts."""
        from halluprobe.reader._train import pooled

        s = pooled(z, self.pool)
        if self.anchor is None:
            return s
        if texts is None:
            raise ValueError("an anchored reader needs the texts to compute the overlap score")
        from halubench_data.grounding import overlap_score

        return self.anchor(s, np.array([overlap_score(*t) for t in texts], dtype=np.float64))

    def logit(self, raw: np.ndarray) -> np.ndarray:
        """``[n]`` calibrated logits of raw scores."""
        a, b = self.calibration
        return a * np.asarray(raw, np.float64) + b
