"""[`Detector.fit`][halluprobe.Detector.fit]: rows and labels checked, a validation split, one protocol.

The probe is fitted by `halluprobe.training._protocol.train_feature_sets` with a calibration on the
validation sources, as ``halluprobe train`` fits its probes: a detector fitted here and one written by the
command line follow one protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from halluprobe.detectors._prediction import Item, as_items


def fit_detector(
    det: Any, X: Any, y: Any, *, groups: Any = None, sources: Any = None, validation: Any = None
) -> Any:
    """The body of [`Detector.fit`][halluprobe.Detector.fit] (same arguments); returns ``det`` fitted.

    ``det`` is the `Detector` (not imported here: `Detector.fit` imports this module).
    """
    from halluprobe.blocks._blocks import parse_feature_set
    from halluprobe.training._protocol import train_feature_sets

    blocks = parse_feature_set(det.feature_set)  # an unknown name fails before the proxy loads
    rows: list[Any] = as_items(X)
    labels = _labels(y, len(rows))
    groups = _per_row(groups, rows, "group", [f"row{i}" for i in range(len(rows))])
    sources = _per_row(sources, rows, "source", ["data"] * len(rows))
    val = validation_mask(validation, labels, groups, det.validation_fraction, det.random_state)
    if isinstance(rows[0], Item):
        rows = _records_of_texts(det, X)
    tr, va = np.flatnonzero(~val), np.flatnonzero(val)
    hidden = det.hidden_layers
    if hidden is None or ("A7" in blocks and det.head_order is None):
        ext = det.extractor()  # loads the proxy: the default hidden layer and the induction ranking
        hidden = ext.hidden_layers if hidden is None else hidden
    order = list(det.head_order) if det.head_order is not None else _ranking(det, "A7" in blocks)
    fits = train_feature_sets(
        [det.feature_set], order, [rows[i] for i in tr], labels[tr], [groups[i] for i in tr],
        [rows[i] for i in va], labels[va], val_sources=[sources[i] for i in va],
    )  # fmt: skip
    det._fitted(fits[det.feature_set], None, tuple(int(i) for i in hidden or ()))
    det._restrict_reads()
    return det


def _records_of_texts(det: Any, X: Any) -> list:
    """Records of text rows, computed with every statistic (the probe is not fitted yet)."""
    ext = det.extractor()
    reads, ext.reads = ext.reads, None
    try:
        return det.records(X)
    finally:
        ext.reads = reads


def _ranking(det: Any, needed: bool) -> list[int]:
    """Heads ranked by induction score on the detector's proxy (scored layers only); [0] when unused."""
    if not needed:
        return [0]
    from halluprobe.blocks._induction import induction_scores, rank_heads

    model = det.extractor().model
    layers = det.layers if det.layers is not None else range(int(model.config.num_hidden_layers))
    return rank_heads(induction_scores(model), tuple(layers))


def _labels(y: Any, n: int) -> np.ndarray:
    labels = np.asarray(y)
    if labels.shape != (n,):
        raise ValueError(f"y must hold one label per row of X: expected shape ({n},), got {labels.shape}")
    if not np.isin(labels, (0, 1)).all() or labels.dtype == bool:
        raise ValueError(
            f"y must hold labels 0 (supported) and 1 (hallucinated), got {sorted(set(labels.tolist()))}"
        )
    return labels.astype(np.int64)


def _per_row(values: Any, rows: Sequence[Any], field: str, default: list[str]) -> list[str]:
    """``values`` as ``n`` strings; None: each row's ``field`` attribute when it has one, else ``default``."""
    if values is None:
        if all(hasattr(r, field) for r in rows):
            return [str(getattr(r, field)) for r in rows]
        return default
    out = [str(v) for v in values]
    if len(out) != len(rows):
        raise ValueError(f"{field}s must hold one value per row of X: expected {len(rows)}, got {len(out)}")
    return out


def validation_mask(
    validation: Any, y: np.ndarray, groups: list[str], fraction: float, seed: int
) -> np.ndarray:
    """``[n] bool``: the given mask, checked, or one fold of a stratified group K-fold (K = ``1 / fraction``).

    Raises:
        ValueError: a mask of another length, too few groups, or a side without both labels.
    """
    n = len(y)
    if validation is not None:
        mask = np.asarray(validation, dtype=bool)
        if mask.shape != (n,):
            raise ValueError(f"validation must be a [n] bool mask with n = {n}, got shape {mask.shape}")
    else:
        from sklearn.model_selection import StratifiedGroupKFold

        if not 0.0 < fraction < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got {fraction}")
        k = max(2, round(1.0 / fraction))
        if len(set(groups)) < k:
            raise ValueError(
                f"a validation split of {fraction:g} needs at least {k} groups, got {len(set(groups))}; "
                "give more examples, fewer shared groups, or a validation mask"
            )
        folds = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
        _, held = next(folds.split(np.zeros(n), y, groups))
        mask = np.zeros(n, dtype=bool)
        mask[held] = True
    for name, part in (("training", y[~mask]), ("validation", y[mask])):
        if set(part.tolist()) != {0, 1}:
            raise ValueError(
                f"the {name} rows need both labels (0 and 1), got {sorted(set(part.tolist()))} in "
                f"{len(part)} rows"
            )
    return mask
