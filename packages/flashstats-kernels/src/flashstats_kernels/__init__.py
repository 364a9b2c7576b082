"""Attention statistics inside FlashAttention-style kernels, without materialising the attention matrix."""

from flashstats_kernels._problem import MAX_HEAD_DIM
from flashstats_kernels.api import response_attention, response_columns, response_lookups
from flashstats_kernels.decode import decode_attention
from flashstats_kernels.features import (
    bos_sink_rate,
    first_real_key,
    lookback_ratio,
    topk_sink_rate,
    visible_key_counts,
)
from flashstats_kernels.naive import naive_response_attention
from flashstats_kernels.ops.dense import dense_response_block, dense_statistics, row_topk_mass
from flashstats_kernels.state import (
    ColumnState,
    RowState,
    RowTargets,
    finalize_state,
    merge_states,
    row_state,
)
from flashstats_kernels.types import AttentionResult, ColumnStats, LookupStats, RowStats, StatsRequest
from flashstats_kernels.varlen import response_attention_varlen

__version__ = "0.1.0"

__all__ = [
    "MAX_HEAD_DIM",
    "AttentionResult",
    "ColumnState",
    "ColumnStats",
    "LookupStats",
    "RowState",
    "RowStats",
    "RowTargets",
    "StatsRequest",
    "bos_sink_rate",
    "decode_attention",
    "dense_response_block",
    "dense_statistics",
    "finalize_state",
    "first_real_key",
    "lookback_ratio",
    "merge_states",
    "naive_response_attention",
    "response_attention",
    "response_attention_varlen",
    "response_columns",
    "response_lookups",
    "row_state",
    "row_topk_mass",
    "topk_sink_rate",
    "visible_key_counts",
]
