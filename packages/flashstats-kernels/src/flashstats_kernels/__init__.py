"""Attention statistics inside FlashAttention-style kernels, without materialising the attention matrix."""

from flashstats_kernels.api import response_attention, response_columns, response_lookups
from flashstats_kernels.naive import naive_response_attention
from flashstats_kernels.types import AttentionResult, ColumnStats, LookupStats, RowStats, StatsRequest

__version__ = "0.1.0"

__all__ = [
    "AttentionResult",
    "ColumnStats",
    "LookupStats",
    "RowStats",
    "StatsRequest",
    "naive_response_attention",
    "response_attention",
    "response_columns",
    "response_lookups",
]
