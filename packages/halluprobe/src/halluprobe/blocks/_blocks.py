"""Feature blocks A7, A64, H64 and L9 (paper Section 5.2) and G (grounding), fitted on training records only.

The context contrast block C is in ``halluprobe.blocks._contrast``.

Every block maps a list of [`ExampleRecord`][halluprobe.ExampleRecord] to a ``[n, d]`` float64
matrix. Blocks are scikit-learn transformers: their constructor arguments are their parameters
(``get_params`` / ``set_params``, ``sklearn.base.clone``), ``fit(records, y=None)`` returns the block
and ``fit_transform`` comes from ``TransformerMixin``, so a block can head a ``Pipeline`` run by
``cross_val_score`` on a list of records. Fitted state is plain numpy arrays plus a JSON-able config,
so a trained detector saves without pickle (`Block.state` / `block_from_state`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from flashstats_hf.logits import LOGIT_STAT_NAMES
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.preprocessing import StandardScaler

from halluprobe.blocks._names import (  # re-exported: the feature-set names live beside the blocks
    BLOCK_NAMES as BLOCK_NAMES,
    PAPER_BLOCKS as PAPER_BLOCKS,
    parse_feature_set as parse_feature_set,
)
from halluprobe.features._records import HEAD_FEATURES, HEAD_STATS, MAX_SINKS, POOLS, ExampleRecord

A7_CANDIDATES: tuple[str, ...] = tuple(
    f"{s}.{p}"
    for s in ("max_weight", "effective_support", "entropy", "lookback_ratio", "prev_weight")
    for p in POOLS
) + ("bos_sink.mean", "diag_log.mean")
"""The paper's 22 candidate features of one head (Section 5.2): four poolings of five per-token
statistics (maximum weight, effective support, entropy, the lookback ratio built from prompt mass,
the previous-token weight), the BOS sink rate and the log-diagonal."""

KS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Numbers of induction heads searched for A7's ``K``, ascending (ties go to the first)."""

L9_CANDIDATES: tuple[str, ...] = tuple(f"{s}.{p}" for s in LOGIT_STAT_NAMES for p in POOLS)
"""The paper's 224 logit candidates (Appendix L.2): four poolings of six scalar statistics and of
the top-k probability at every rank up to 50."""


def _packaged_selection(block: str) -> tuple[str, ...]:
    """The features of the packaged default selection of ``block`` (``halluprobe/blocks/selections/``)."""
    from importlib import resources

    text = resources.files("halluprobe.blocks").joinpath("selections", f"{block.lower()}.json").read_text()
    return tuple(json.loads(text)["features"])


A7_SELECTION: tuple[str, ...] = _packaged_selection("A7")
"""The seven A7 features used by default: chosen once by `halluprobe.blocks.select_a7` and
stored with how they were obtained in ``halluprobe/blocks/selections/a7.json`` (see its ``provenance``)."""

L9_SELECTION: tuple[str, ...] = _packaged_selection("L9")
"""The nine L9 features used by default, selected once by `halluprobe.blocks.select_l9` and
frozen (``halluprobe/blocks/selections/l9.json``); never refit on a training split."""


def _check_int(block: str, field: str, value: Any, lo: int, hi: int | None = None) -> None:
    """A named error unless ``value`` is an integer (not a bool) in ``[lo, hi]``."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not ok or value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{block} {field} must be an integer {bound}, got {value!r}")


def _stat(records: list[ExampleRecord], stat: str, pool: str) -> np.ndarray:
    """``[n, NL, H]`` one pooled head statistic."""
    s, p = HEAD_STATS.index(stat), POOLS.index(pool)
    return np.stack([r.head_stats[:, :, s, p] for r in records]).astype(np.float64)


def _check_columns(block: str, what: str, expected: int, got: int, *, at_least: bool = False) -> None:
    """A named error when records do not have the columns a fitted block expects."""
    if got < expected if at_least else got != expected:
        need = f"at least {expected}" if at_least else str(expected)
        raise ValueError(
            f"feature block {block} expects {need} {what} per example, the records give {got} "
            "(records from another proxy, layer set or sink count than the block was fitted on?)"
        )


def scaler_from_arrays(mean: np.ndarray, scale: np.ndarray) -> StandardScaler:
    """A fitted ``StandardScaler`` from its two arrays (``[d]`` each), as a saved detector stores them.

    Only the documented fitted attributes are set (``mean_``, ``scale_``, ``n_features_in_``): its
    ``transform`` is ``(x - mean) / scale``.
    """
    scaler = StandardScaler()
    scaler.mean_, scaler.scale_ = np.asarray(mean, np.float64), np.asarray(scale, np.float64)
    scaler.n_features_in_ = int(scaler.mean_.shape[0])
    return scaler


class Block(TransformerMixin, BaseEstimator):
    """Base class of a feature block; subclasses set ``name``, ``_config`` and ``_raw``.

    A subclass's ``__init__`` stores its arguments unchanged under their own names (scikit-learn's
    rule, so that ``clone`` and ``set_params`` work); `config` is their normalised JSON form.
    """

    name = ""

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Fitted arrays by name (empty before ``fit`` for blocks that fit something)."""
        return self.__dict__.setdefault("arrays_", {})

    @arrays.setter
    def arrays(self, value: dict[str, np.ndarray]) -> None:
        self.__dict__["arrays_"] = dict(value)

    @property
    def config(self) -> dict[str, Any]:
        """The block's parameters as JSON-able values (what `state` saves)."""
        return self._config()

    def _config(self) -> dict[str, Any]:
        raise NotImplementedError

    def _raw(self, records: list[ExampleRecord]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, records: list[ExampleRecord], y: np.ndarray | None = None) -> Block:
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
    `HEAD_FEATURES`; default the packaged selection `A7_SELECTION` from the paper's candidates
    `A7_CANDIDATES`).
    """

    name = "A7"

    def __init__(self, heads: list[int], features: tuple[str, ...] = A7_SELECTION):
        bad = [f for f in features if f not in HEAD_FEATURES]
        if bad or not len(heads) or not features:
            raise ValueError(f"A7 needs at least one head and features from HEAD_FEATURES; bad: {bad}")
        for head in heads:  # flat indices into the NL * H scored heads (their upper end: at transform)
            _check_int("A7", "heads", head, 0)
        self.heads = heads
        self.features = features

    def _config(self):
        return {"heads": [int(h) for h in self.heads], "features": list(self.features)}

    def _raw(self, records):
        cols, heads = [], self.config["heads"]
        for feat in self.features:
            stat, p = feat.split(".")
            x = _stat(records, stat, p).reshape(len(records), -1)
            _check_columns(self.name, "head index", max(heads) + 1, x.shape[1], at_least=True)
            cols.append(x[:, heads].mean(1))
        return np.stack(cols, 1)


class _ProjectedBlock(Block):
    """Standardise raw columns on train, then project on the leading principal components."""

    components: int

    def fit(self, records, y=None):
        """Fit scikit-learn's ``StandardScaler`` and ``PCA`` on training records (min(64, n-1, d) components).

        Their fitted arrays are kept (``mean``, ``scale``, ``center``, ``components``), which is what a
        saved detector stores and what `transform` applies: the same arithmetic as
        ``PCA.transform(StandardScaler.transform(x))``. ``PCA`` flips each component so that its largest
        loading is positive, so the signs are reproducible.
        """
        from sklearn.decomposition import PCA  # fit only: a saved detector's predictions never import it

        x = self._raw(records)
        sc = StandardScaler().fit(x)
        n_comp = max(1, min(int(self.components), x.shape[0] - 1, x.shape[1]))
        pca = PCA(n_comp, svd_solver="full").fit(sc.transform(x))
        self.arrays = {
            "mean": sc.mean_,
            "scale": sc.scale_,
            "center": pca.mean_,
            "components": pca.components_,
        }
        return self

    def transform(self, records):
        """``[n, components]``: standardised raw columns projected on the fitted components."""
        if not self.arrays:
            raise ValueError(f"block {self.name} is not fitted")
        a = self.arrays
        x = self._raw(records)
        _check_columns(self.name, "raw features", a["mean"].shape[0], x.shape[1])
        z = (x - a["mean"]) / a["scale"]
        return (z - a["center"]) @ a["components"].T


class A64Block(_ProjectedBlock):
    """The ``k`` largest sink values ``c̄_j`` of every head, concatenated, standardised, PCA."""

    name = "A64"

    def __init__(self, k: int = 1, components: int = 64):
        _check_int("A64", "sink count k", k, 1, MAX_SINKS)
        _check_int("A64", "components", components, 1)
        self.k = k
        self.components = components

    def _config(self):
        return {"k": int(self.k), "components": int(self.components)}

    def _raw(self, records):
        k = int(self.k)
        return np.stack([r.sink_topk[:, :, :k].reshape(-1) for r in records]).astype(np.float64)


class H64Block(_ProjectedBlock):
    """Mean and standard deviation over answer tokens of one hidden layer, standardised, PCA.

    Config: ``layer`` is the position of the layer in the records' kept hidden layers.
    """

    name = "H64"

    def __init__(self, layer: int = 0, components: int = 64):
        _check_int("H64", "layer", layer, 0)
        _check_int("H64", "components", components, 1)
        self.layer = layer
        self.components = components

    def _config(self):
        return {"layer": int(self.layer), "components": int(self.components)}

    def _raw(self, records):
        i = int(self.layer)
        return np.stack([r.hidden_pooled[i].reshape(-1) for r in records]).astype(np.float64)


class L9Block(Block):
    """Pooled logit statistics, a fixed selection of `L9_CANDIDATES` (nothing fitted per split).

    The paper selects its nine once and reuses them on every dataset and proxy (Appendix L.1); the
    default is the packaged selection `L9_SELECTION` (`halluprobe.blocks.select_l9`).
    Config: ``features`` (names ``"<statistic>.<pool>"`` from `L9_CANDIDATES`).
    """

    name = "L9"

    def __init__(self, features: tuple[str, ...] = L9_SELECTION):
        bad = [f for f in features if f not in L9_CANDIDATES]
        if bad or not features:
            raise ValueError(f"L9 needs features from L9_CANDIDATES; bad: {bad}")
        self.features = features

    def _config(self):
        return {"features": list(self.features)}

    def _raw(self, records):
        return l9_matrix(records, self.features)


def l9_matrix(records: list[ExampleRecord], features) -> np.ndarray:
    """``[n, len(features)]`` pooled logit statistics named ``"<statistic>.<pool>"``.

    Raises:
        ValueError: The records hold another number of logit statistics than ``LOGIT_STAT_NAMES``
            (extracted by an older version: re-extract them).
    """
    v = len(LOGIT_STAT_NAMES)
    if any(r.logit_pooled.shape != (v, len(POOLS)) for r in records):
        shapes = sorted({tuple(r.logit_pooled.shape) for r in records})
        raise ValueError(
            f"records hold logit statistics of shapes {shapes}, expected ({v}, 4); re-extract them"
        )
    idx = [(LOGIT_STAT_NAMES.index(f.rsplit(".", 1)[0]), POOLS.index(f.rsplit(".", 1)[1])) for f in features]
    rows, cols = np.array([i for i, _ in idx]), np.array([j for _, j in idx])
    return np.stack([r.logit_pooled[rows, cols] for r in records]).astype(np.float64)


class GBlock(Block):
    """Text-only grounding features of the example (``ExampleRecord.grounding``), standardised on train.

    Nothing is projected: the few features (`halluprobe.features._grounding.feature_names`) enter as they are,
    centred and scaled with the training records' means and standard deviations.
    Config: ``features`` (the grounding feature names the block was fitted on; `transform` refuses
    records of another width, and a saved block whose names differ from this install's is refused on
    load).
    """

    name = "G"

    def __init__(self, features: tuple[str, ...] | None = None):
        self.features = features

    def _names(self) -> tuple[str, ...]:
        from halluprobe.features._grounding import feature_names

        return tuple(self.features) if self.features is not None else feature_names()

    def _config(self):
        return {"features": list(self._names())}

    def _raw(self, records):
        width = len(self._names())
        bad = [r.id for r in records if r.grounding.shape != (width,)]
        if bad:
            raise ValueError(
                f"feature block G reads {width} grounding features per record; records {bad[:3]} have "
                "others (records extracted without grounding: fill them with "
                "halluprobe.features._grounding.fill_grounding(records, examples))"
            )
        return (
            np.stack([r.grounding for r in records]).astype(np.float64) if records else np.zeros((0, width))
        )

    def fit(self, records, y=None):
        """Learn the grounding features' means and scales on training records."""
        sc = StandardScaler().fit(self._raw(records))
        self.arrays = {"mean": sc.mean_, "scale": sc.scale_}
        return self

    def transform(self, records):
        """``[n, G]``: the standardised grounding features."""
        if not self.arrays:
            raise ValueError(f"block {self.name} is not fitted")
        return (self._raw(records) - self.arrays["mean"]) / self.arrays["scale"]
