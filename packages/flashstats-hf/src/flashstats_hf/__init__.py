"""Statistics from one teacher-forced Transformers forward: the ``"attnstats"`` attention backend."""

from flashstats_hf.attention import (
    ATTN_IMPLEMENTATION,
    AttentionWeightsUnavailableError,
    flashstats_attention_forward,
    flashstats_mask,
    register_flashstats,
)
from flashstats_hf.cached import CachedRecorder
from flashstats_hf.decode_graph import GraphedDecodeStep
from flashstats_hf.formatting import Batch, collate, format_example, format_prompt
from flashstats_hf.graphs import GraphedRecorder, PooledStats
from flashstats_hf.loading import DEFAULT_MODEL, load_model
from flashstats_hf.logits import LOGIT_SCALAR_NAMES, LOGIT_STAT_NAMES, TOP_RANKS, logit_statistics
from flashstats_hf.plain_graph import GraphedForward
from flashstats_hf.pooling import COLUMN_TOPK, POOL_NAMES, column_topk, pool_tokens
from flashstats_hf.record import DEFAULT_REQUEST, record_forward
from flashstats_hf.types import ColumnTopK, ForwardStats

__version__ = "0.1.0"

register_flashstats()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "COLUMN_TOPK",
    "AttentionWeightsUnavailableError",
    "DEFAULT_MODEL",
    "DEFAULT_REQUEST",
    "LOGIT_SCALAR_NAMES",
    "LOGIT_STAT_NAMES",
    "POOL_NAMES",
    "pool_tokens",
    "TOP_RANKS",
    "Batch",
    "CachedRecorder",
    "ColumnTopK",
    "ForwardStats",
    "GraphedDecodeStep",
    "GraphedForward",
    "GraphedRecorder",
    "PooledStats",
    "collate",
    "column_topk",
    "flashstats_attention_forward",
    "flashstats_mask",
    "format_example",
    "format_prompt",
    "load_model",
    "logit_statistics",
    "record_forward",
    "register_flashstats",
]
