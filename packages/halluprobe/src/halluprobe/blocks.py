"""Feature blocks A7, A64, H64 and L9 (paper Section 5.2), fitted on training records only.

Every block maps a list of [`ExampleRecord`][halluprobe.ExampleRecord] to a ``[n, d]`` float64
matrix. Fitted state is plain numpy arrays plus a JSON-able config, so a trained detector saves
without pickle (`Block.state` / `block_from_state`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from halluprobe.records import HEAD_STATS, MAX_SINKS, POOLS, ExampleRecord

A7_CANDIDATES: tuple[str, ...] = tuple(
    f"{s}.{p}"
    for s in ("max_weight", "effective_support", "entropy", "lookback_ratio", "normalized_entropy")
    for p in POOLS
) + ("bos_sink.mean", "diag_log.mean")
"""The 22 candidate features of one head: four poolings of five per-token statistics, the BOS sink
rate and the log-diagonal."""

A7_SELECTION: tuple[str, ...] = (
    "max_weight.mean",
    "effective_support.mean",
    "entropy.mean",
    "entropy.std",
    "lookback_ratio.mean",
    "bos_sink.mean",
    "diag_log.mean",
)
"""The seven A7 features we keep. The paper marks its seven in bold in a list that our copy of the
text lost; this choice (one mean per statistic family, the spread of entropy, the BOS sink rate and
the log-diagonal) is ours and is documented in ``docs/reference/detectors.md``."""

BLOCK_NAMES: tuple[str, ...] = ("A7", "A64", "H64", "L9")
"""Block names in the canonical order of a feature set."""


def parse_feature_set(name: str) -> tuple[str, ...]:
    """Split a feature-set name such as ``"A7H64"`` or ``"ALL"`` into its blocks.

    Raises:
        ValueError: The name is not a concatenation of distinct block names.
    """
    if name == "ALL":
        return BLOCK_NAMES
    parts = re.findall(r"A64|A7|H64|L9", name)
    if not parts or "".join(parts) != name or len(set(parts)) != len(parts):
        raise ValueError(
            f"feature set {name!r} is not a concatenation of distinct blocks {BLOCK_NAMES} or 'ALL'"
        )
    return tuple(b for b in BLOCK_NAMES if b in parts)


def _stat(records: list[ExampleRecord], stat: str, pool: str) -> np.ndarray:
    """``[n, NL, H]`` one pooled head statistic."""
    s, p = HEAD_STATS.index(stat), POOLS.index(pool)
    return np.stack([r.head_stats[:, :, s, p] for r in records]).astype(np.float64)


class Standardizer:
    """Column standardisation fitted on training rows (zero-variance columns are left centred)."""

    def fit(self, x: np.ndarray) -> Standardizer:
        """Learn column means and scales from ``x`` ``[n, d]``."""
        self.mean_ = x.mean(0)
        sd = x.std(0)
        self.scale_ = np.where(sd > 1e-12, sd, 1.0)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardise ``x`` ``[n, d]`` with the fitted means and scales."""
        return (x - self.mean_) / self.scale_


class Block:
    """Base class of a feature block; subclasses set ``name`` and implement ``_raw``."""

    name = ""

    def __init__(self, **config: Any):
        self.config = config
        self.arrays: dict[str, np.ndarray] = {}

    def _raw(self, records: list[ExampleRecord]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, records: list[ExampleRecord], y: np.ndarray) -> Block:
        """Fit the block's scaler/projection/selection on training records (default: nothing)."""
        return self

    def transform(self, records: list[ExampleRecord]) -> np.ndarray:
        """``[n, d] float64`` features of ``records``."""
        return self._raw(records)

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The block's JSON config and fitted arrays (for saving)."""
        return {"name": self.name, **self.config}, dict(self.arrays)


class A7Block(Block):
    """Selected statistics of the top-K induction heads, each averaged across the heads.

    Config: ``heads`` (flat indices into the ``NL * H`` scored heads), ``features`` (names from
    `A7_CANDIDATES`).
    """

    name = "A7"

    def __init__(self, heads: list[int], features: tuple[str, ...] = A7_SELECTION):
        bad = [f for f in features if f not in A7_CANDIDATES]
        if bad or not heads:
            raise ValueError(f"A7 needs at least one head and features from A7_CANDIDATES; bad: {bad}")
        super().__init__(heads=[int(h) for h in heads], features=list(features))

    def _raw(self, records):
        cols = []
        for feat in self.config["features"]:
            stat, p = feat.split(".")
            x = _stat(records, stat, p)
            cols.append(x.reshape(len(records), -1)[:, self.config["heads"]].mean(1))
        return np.stack(cols, 1)


class _ProjectedBlock(Block):
    """Standardise raw columns on train, then project on the leading principal components."""

    def fit(self, records, y):
        """Fit the standardiser and PCA on training records; components = min(64, n-1, d)."""
        x = self._raw(records)
        sc = Standardizer().fit(x)
        z = sc.transform(x)
        n_comp = max(1, min(int(self.config["components"]), x.shape[0] - 1, x.shape[1]))
        center = z.mean(0)
        _, _, vt = np.linalg.svd(z - center, full_matrices=False)
        # sign convention: the largest loading of each component is positive (reproducible signs)
        flip = np.sign(vt[np.arange(vt.shape[0]), np.abs(vt).argmax(1)])
        vt = vt * np.where(flip == 0, 1.0, flip)[:, None]
        self.arrays = {"mean": sc.mean_, "scale": sc.scale_, "center": center, "components": vt[:n_comp]}
        return self

    def transform(self, records):
        """``[n, components]``: standardised raw columns projected on the fitted components."""
        if not self.arrays:
            raise ValueError(f"block {self.name} is not fitted")
        a = self.arrays
        z = (self._raw(records) - a["mean"]) / a["scale"]
        return (z - a["center"]) @ a["components"].T


class A64Block(_ProjectedBlock):
    """The ``k`` largest sink values ``c̄_j`` of every head, concatenated, standardised, PCA."""

    name = "A64"

    def __init__(self, k: int = 1, components: int = 64):
        if not 1 <= k <= MAX_SINKS:
            raise ValueError(f"A64 sink count k must be in 1..{MAX_SINKS}, got {k}")
        super().__init__(k=int(k), components=int(components))

    def _raw(self, records):
        k = self.config["k"]
        return np.stack([r.sink_topk[:, :, :k].reshape(-1) for r in records]).astype(np.float64)


class H64Block(_ProjectedBlock):
    """Mean and standard deviation over answer tokens of one hidden layer, standardised, PCA.

    Config: ``layer`` is the position of the layer in the records' kept hidden layers.
    """

    name = "H64"

    def __init__(self, layer: int = 0, components: int = 64):
        super().__init__(layer=int(layer), components=int(components))

    def _raw(self, records):
        i = self.config["layer"]
        return np.stack([r.hidden_pooled[i].reshape(-1) for r in records]).astype(np.float64)


class L9Block(Block):
    """Nine pooled logit statistics kept by recursive feature elimination on training records."""

    name = "L9"

    def __init__(self, n_features: int = 9):
        super().__init__(n_features=int(n_features))

    def _all(self, records):
        return np.stack([r.logit_pooled.reshape(-1) for r in records]).astype(np.float64)

    def fit(self, records, y):
        """Keep ``n_features`` pooled statistics by RFE with a balanced logistic regression."""
        from sklearn.feature_selection import RFE
        from sklearn.linear_model import LogisticRegression

        x = self._all(records)
        sc = Standardizer().fit(x)
        n = min(self.config["n_features"], x.shape[1])
        est = LogisticRegression(solver="liblinear", class_weight="balanced", C=1.0)
        rfe = RFE(est, n_features_to_select=n).fit(sc.transform(x), np.asarray(y))
        self.arrays = {"selected": np.flatnonzero(rfe.support_).astype(np.int64)}
        return self

    def _raw(self, records):
        if not self.arrays:
            raise ValueError("block L9 is not fitted")
        return self._all(records)[:, self.arrays["selected"]]


_BLOCKS = {c.name: c for c in (A7Block, A64Block, H64Block, L9Block)}


def block_from_state(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Block:
    """Rebuild a fitted block from `Block.state` output (no code is run from the file)."""
    config = dict(config)
    name = config.pop("name", None)
    if name not in _BLOCKS:
        raise ValueError(f"unknown feature block {name!r}; expected one of {sorted(_BLOCKS)}")
    if name == "A7":
        config["features"] = tuple(config["features"])
    block = _BLOCKS[name](**config)
    block.arrays = {k: np.asarray(v) for k, v in arrays.items()}
    return block
