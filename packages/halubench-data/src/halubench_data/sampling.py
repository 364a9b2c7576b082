"""Seeded samples of a dataset: uniform, label-balanced, per split, or the shortest examples.

Each returns a new `Dataset` of the same name whose examples keep their order in the original
(`halubench_data.select.subsample` is the ``--limit`` sample every CLI shares).
"""

from __future__ import annotations

import numpy as np

from halubench_data.dataset import Dataset
from halubench_data.schema import SPLITS, Example

__all__ = ["balanced", "first_per_label", "shortest_per_split", "uniform", "uniform_per_split"]


def _draw(pool: list[Example], n: int, rng: np.random.Generator) -> list[Example]:
    """At most ``n`` of ``pool``, drawn without replacement, in pool order."""
    idx = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    return [pool[i] for i in sorted(idx.tolist())]


def _check(n: int, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {n!r}")


def uniform(ds: Dataset, n: int, *, seed: int = 42) -> Dataset:
    """At most ``n`` examples of ``ds``, drawn uniformly (splits ignored)."""
    _check(n, "n")
    return Dataset(tuple(_draw(list(ds.examples), n, np.random.default_rng(seed))), ds.name)


def uniform_per_split(ds: Dataset, n: int, *, seed: int = 42) -> Dataset:
    """At most ``n`` examples of each split, drawn uniformly (each split with a fresh ``seed``)."""
    _check(n, "n")
    keep = [e for s in SPLITS for e in _draw(list(ds.split(s).examples), n, np.random.default_rng(seed))]
    return Dataset(tuple(keep), ds.name)


def balanced(ds: Dataset, n: int, *, seed: int = 42) -> Dataset:
    """``n`` examples, ``ceil(n / 2)`` hallucinated and ``floor(n / 2)`` supported where there are enough."""
    _check(n, "n")
    rng = np.random.default_rng(seed)
    keep = [e for label, want in ((1, (n + 1) // 2), (0, n // 2))
            for e in _draw([e for e in ds if e.label == label], want, rng)]  # fmt: skip
    return Dataset(tuple(keep), ds.name)


def first_per_label(ds: Dataset, limit: int) -> Dataset:
    """The first ``ceil(limit / 2)`` hallucinated and ``floor(limit / 2)`` supported examples."""
    _check(limit, "limit")
    pos = [e for e in ds if e.label == 1][: (limit + 1) // 2]
    neg = [e for e in ds if e.label == 0][: limit // 2]
    return Dataset(tuple(pos + neg), ds.name)


def shortest_per_split(ds: Dataset, limit: int) -> Dataset:
    """At most ``limit`` examples per split, the shortest of each label, distinct groups first.

    Per split, ``ceil(limit / 2)`` hallucinated and ``floor(limit / 2)`` supported examples, by
    context + answer length; within a label, one example per group is taken before a second of any
    group, so that grouped cross-validation on the sample has folds. For a quick dry run.
    """
    _check(limit, "limit")
    keep = []
    for split in SPLITS:
        part = ds.split(split).examples
        for label, want in ((1, (limit + 1) // 2), (0, limit // 2)):
            pool = sorted((e for e in part if e.label == label), key=lambda e: len(e.context) + len(e.answer))
            seen: set[str] = set()
            chosen: list[Example] = []
            for e in pool:
                if e.group not in seen and len(chosen) < want:
                    chosen.append(e)
                    seen.add(e.group)
            chosen += [e for e in pool if e not in chosen][: want - len(chosen)]
            keep.extend(chosen)
    return Dataset(tuple(keep), ds.name)
