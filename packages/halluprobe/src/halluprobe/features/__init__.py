"""Features of a proxy model's forward: the extractor, per-example records, the cache, per-token data, ranks.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.features._cache import CacheRepairWarning, FeatureCache
    from halluprobe.features._distributed import World, close_world, init_world, shard_batches
    from halluprobe.features._extract import ProxyExtractor, extract_records, plan_batches
    from halluprobe.features._records import (
        HEAD_STATS,
        MAX_SINKS,
        POOLS,
        ExampleRecord,
        reduce_forward,
        token_records,
    )
    from halluprobe.features._timed import DeadlineReached, TimedCompute
    from halluprobe.features._token_data import (
        TOKEN_VIEWS,
        TokenExample,
        TokenStore,
        token_features,
        token_offsets,
    )
    from halluprobe.features._token_examples import token_examples

_EXPORTS = {
    "_extract": ("ProxyExtractor", "extract_records", "plan_batches"),
    "_cache": ("CacheRepairWarning", "FeatureCache"),
    "_records": ("HEAD_STATS", "MAX_SINKS", "POOLS", "ExampleRecord", "reduce_forward", "token_records"),
    "_distributed": ("World", "close_world", "init_world", "shard_batches"),
    "_token_data": (
        "TOKEN_VIEWS",
        "TokenExample",
        "TokenStore",
        "token_features",
        "token_offsets",
    ),
    "_token_examples": ("token_examples",),
    "_timed": ("DeadlineReached", "TimedCompute"),
}

__all__ = [
    "CacheRepairWarning",
    "close_world",
    "DeadlineReached",
    "ExampleRecord",
    "extract_records",
    "FeatureCache",
    "HEAD_STATS",
    "init_world",
    "MAX_SINKS",
    "plan_batches",
    "POOLS",
    "ProxyExtractor",
    "reduce_forward",
    "shard_batches",
    "TimedCompute",
    "token_examples",
    "token_features",
    "token_offsets",
    "token_records",
    "TOKEN_VIEWS",
    "TokenExample",
    "TokenStore",
    "World",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS)
