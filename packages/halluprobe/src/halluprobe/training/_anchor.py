"""Anchored candidates of a general detector: the zero-fit overlap floor mixed with a probe.

An anchored candidate ``O+<set>`` scores ``(1 - w) * z(overlap) + w * z(probe logit)``, both z-scored on
the training answers (`anchored_scores`); `anchor` folds a chosen ``w`` into one linear probe over the G
block (its overlap column alone) and the probe's blocks, so that it saves, loads and calibrates like any
other probe. `halluprobe.training._general` chooses ``<set>`` and ``w`` by leave-one-source-out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.preprocessing import StandardScaler

from halluprobe.blocks._blocks import GBlock, parse_feature_set, scaler_from_arrays
from halluprobe.features._grounding import feature_names
from halluprobe.features._records import ExampleRecord
from halluprobe.training._protocol import ProbeFit

__all__ = ["ANCHOR", "ANCHOR_WEIGHTS", "anchor", "anchored_scores", "parse_candidate"]

ANCHOR = "O+"
"""Prefix of an anchored candidate: the overlap floor mixed with a probe of the rest of the name."""
ANCHOR_WEIGHTS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5)
"""Probe weights ``w`` an anchored candidate tries (the overlap floor weighs ``1 - w``)."""


def parse_candidate(name: str) -> tuple[str, bool]:
    """``(probe feature set, anchored)`` of a candidate name such as ``"GA7H64"`` or ``"O+A7H64"``.

    Raises:
        ValueError: an unknown feature set, or an anchored one that already holds G.
    """
    anchored = name.startswith(ANCHOR)
    fs = name[len(ANCHOR) :] if anchored else name
    blocks = parse_feature_set(fs)
    if anchored and "G" in blocks:
        raise ValueError(f"candidate {name!r}: an anchored set brings G itself; drop G from {fs!r}")
    return fs, anchored


def _overlap(records: Sequence[ExampleRecord]) -> np.ndarray:
    """``[n] float64`` zero-fit overlap score (the unsupported share of content words) of each record."""
    col = feature_names().index("unsupported_word_share")
    bad = [r.id for r in records if r.grounding.shape != (len(feature_names()),)]
    if bad:
        raise ValueError(
            f"an anchored candidate reads the records' grounding features; records {bad[:3]} have none "
            "(fill them with halluprobe.features._grounding.fill_grounding(records, examples))"
        )
    return np.array([r.grounding[col] for r in records], dtype=np.float64)


def _z(train: np.ndarray) -> tuple[float, float]:
    """``(mean, scale)`` of a score on the training answers (scale 1 for a constant score)."""
    sd = float(train.std())
    return float(train.mean()), (sd if sd > 1e-12 else 1.0)


def anchored_scores(
    probe: ProbeFit,
    train: Sequence[ExampleRecord],
    records: Sequence[ExampleRecord],
    weights: Sequence[float],
) -> dict[float, np.ndarray]:
    """``{w: [n] scores}``: the overlap floor mixed with ``probe`` at each ``w``, z-scored on ``train``."""
    (mo, so), (mp, sp) = _z(_overlap(train)), _z(probe.decision_function(list(train)))
    zo = (_overlap(records) - mo) / so
    zp = (probe.decision_function(list(records)) - mp) / sp
    return {w: (1.0 - w) * zo + w * zp for w in weights}


def anchor(probe: ProbeFit, train: Sequence[ExampleRecord], y: np.ndarray, w: float) -> ProbeFit:
    """``probe`` mixed with the overlap floor at weight ``w``, as one linear probe over G and its blocks.

    Its logit equals ``anchored_scores(probe, train, records, [w])[w]`` on any records (G enters with its
    overlap column alone). ``train``/``y``: the training records (and labels) the probe was fitted on.
    """
    train = list(train)
    g = GBlock().fit(train, y)
    zg_tr = g.transform(train)
    scaler = StandardScaler().fit(zg_tr)
    (mo, so), (mp, sp) = _z(_overlap(train)), _z(probe.decision_function(train))
    col = feature_names().index("unsupported_word_share")
    # overlap = (zg * g.scale + g.mean) at that column; after the outer scaler: zg = z * s.scale + s.mean
    unit = float(g.arrays["scale"][col] * scaler.scale_[col])  # overlap per unit of the scaled column
    shift = float(g.arrays["mean"][col] + g.arrays["scale"][col] * scaler.mean_[col])
    coef_g = np.zeros(zg_tr.shape[1])
    coef_g[col] = (1.0 - w) * unit / so
    combined = scaler_from_arrays(
        np.concatenate([scaler.mean_, probe.scaler.mean_]),
        np.concatenate([scaler.scale_, probe.scaler.scale_]),
    )
    intercept = (1.0 - w) * (shift - mo) / so + w * (probe.intercept - mp) / sp
    return ProbeFit(
        "G" + probe.feature_set, [g, *probe.blocks], combined,
        np.concatenate([coef_g, w * probe.coef / sp]), float(intercept), probe.C, 0.5, probe.val_auroc,
        {"overlap_weight": 1.0 - w, "probe_weight": w},
    )  # fmt: skip
