"""Text-only grounding features inside example records, and old caches carried over to them.

An [`ExampleRecord`][halluprobe.ExampleRecord] carries ``grounding``: the example's text-only grounding
features ([`halubench_data.grounding.grounding_features`][], in ``GROUNDING_FEATURES`` order), which the
feature block ``G`` ([`halluprobe.blocks.GBlock`][]) reads. They depend on the text alone, never on the
proxy, so a record extracted before they existed is completed from its example (`fill_grounding`)
instead of running the proxy again, and a cache written before them still serves (`cached_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from halluprobe.features._records import ExampleRecord

if TYPE_CHECKING:
    from halluprobe.features._cache import FeatureCache

SETTINGS_KEY = "grounding"
"""The key of the extraction settings (`grounding_settings`) that names the grounding features."""


def feature_names() -> tuple[str, ...]:
    """The grounding features this install computes (``halubench_data.grounding.GROUNDING_FEATURES``)."""
    from halubench_data.grounding import GROUNDING_FEATURES

    return tuple(GROUNDING_FEATURES)


def grounding_settings() -> dict[str, Any]:
    """What the grounding part of a record depends on: the feature names and their version.

    Part of [`ProxyExtractor.settings`][halluprobe.ProxyExtractor.settings] (so part of every cache
    key): records made with other grounding features are never returned as current ones.
    """
    from halubench_data import grounding

    return {"features": list(feature_names()), "version": getattr(grounding, "GROUNDING_VERSION", None)}


def grounding_of(example: Any) -> np.ndarray:
    """``[G] float32``: the grounding features of one example (an object with context, question, answer).

    Raises:
        ValueError: the features are not ``G`` finite numbers.
    """
    from halubench_data.grounding import grounding_features

    x = np.asarray(grounding_features(example.context, example.question, example.answer), dtype=np.float32)
    names = feature_names()
    if x.shape != (len(names),) or not np.isfinite(x).all():
        raise ValueError(
            f"grounding features of example {getattr(example, 'id', '?')!r}: expected {len(names)} finite "
            f"numbers ({', '.join(names)}), got shape {x.shape}"
        )
    return x


def fill_grounding(
    records: Sequence[ExampleRecord], examples: Sequence[Any], *, overwrite: bool = False
) -> list[ExampleRecord]:
    """The records with ``grounding`` computed from their examples where it is missing.

    Args:
        records: Records, one per example, in the same order (ids must match).
        examples: Objects with ``id``, ``context``, ``question`` and ``answer``.
        overwrite: Recompute every record's grounding, not only the empty ones.

    Returns:
        New records (the given ones are not changed); a record whose grounding is already there is
        returned as it is.

    Raises:
        ValueError: the ids of records and examples differ.
    """
    if [r.id for r in records] != [ex.id for ex in examples]:
        raise ValueError("fill_grounding needs one example per record, in the same order (ids differ)")
    width = len(feature_names())
    return [
        replace(r, grounding=grounding_of(ex)) if overwrite or r.grounding.shape != (width,) else r
        for r, ex in zip(records, examples, strict=True)
    ]


def legacy_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Extraction settings as halluprobe wrote them before records carried grounding features."""
    return {k: v for k, v in settings.items() if k != SETTINGS_KEY}


def cached_records(examples: Sequence[Any], caches: Sequence[FeatureCache]) -> dict[str, ExampleRecord]:
    """The records of ``examples`` that the caches hold, by example id, with grounding filled in memory.

    A cache holds an example's record when it has one of exactly its content under the cache's settings
    or under the same settings before grounding (`legacy_settings`: a cache written before records
    carried grounding); the grounding features are computed from the example (`fill_grounding`).
    Nothing is written, so a large cache is reused without a copy; pass the examples not found to
    `halluprobe.extract_records`.

    Args:
        examples: Objects with ``id``, ``context``, ``question`` and ``answer``.
        caches: Cache folders opened with the current proxy settings, searched in order.

    Returns:
        ``{example id: record}`` of the examples found.
    """
    from halluprobe.features._cache import FeatureCache

    todo = {ex.id: ex for ex in examples}
    out: dict[str, ExampleRecord] = {}
    for c in caches:
        for settings in (c.settings, legacy_settings(c.settings)):
            if not todo:
                return out
            view = FeatureCache(c.root, settings)
            want = {view.key(ex): ex for ex in todo.values()}
            found = view.lookup(list(want))
            exs = [want[k] for k in found]
            for ex, r in zip(exs, fill_grounding(list(found.values()), exs), strict=True):
                out[ex.id] = r
                del todo[ex.id]
    return out
