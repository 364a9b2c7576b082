"""Typed results of one recorded teacher-forced forward (the contract with halluprobe).

Shapes: ``B`` examples, ``NL`` scored layers, ``Hq`` query heads, ``A`` answer tokens (the longest
answer in the batch; shorter answers are padded and masked by ``answer_mask``), ``L`` sequence length
(padded), ``S`` sink positions, ``V`` logit statistics, ``NH`` hidden layers, ``Dm`` model width.
Answer token ``a`` of example ``b`` is the ``a``-th token of that example's answer (left-aligned on
the ``A`` axis whatever the padding of the input).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from flashstats_kernels.types import ColumnStats, LookupStats, RowStats


@dataclass(kw_only=True)
class ForwardStats:
    """Statistics of the answer tokens of a batch, from one forward.

    The statistics come first (T1 ``rows``, T2 ``lookups``, T3 ``columns``, logits, hidden states), then
    the layout of the batch that indexes them (layers, masks, lengths). Fields are keyword-only.
    """

    rows: RowStats | None = None
    """T1 per answer token; each field ``[B, NL, Hq, A] float32``."""
    lookups: LookupStats | None = None
    """T2 per answer token: ``diag_log``/``prev_weight`` ``[B, NL, Hq, A]``, ``sink_weights``
    ``[B, NL, Hq, A, S]`` (float32)."""
    columns: ColumnStats | None = None
    """T3 over answer rows: ``sum``/``mean`` ``[B, NL, Hq, L] float32`` indexed by padded key position."""
    logit_stats: torch.Tensor | None = None
    """``[B, A, V] float32``: next-token statistics at the position predicting each answer token."""
    logit_stat_names: tuple[str, ...] = ()
    """Names of the ``V`` logit statistics, in order."""
    hidden: torch.Tensor | None = None
    """``[B, NH, A, Dm] float32``: hidden states at answer tokens."""
    hidden_layers: tuple[int, ...] = ()
    """Indices of the kept hidden states, as in Transformers' ``output_hidden_states``: 0 = the input
    of the first decoder layer (embeddings), ``i`` = the output of decoder layer ``i - 1`` (0-based),
    and the last index (the number of layers) the final normed state."""
    dense: dict[int, torch.Tensor] = field(default_factory=dict)
    """T4, only for the layers and heads named by ``record_forward(dense_heads=...)``: layer index ->
    ``[B, H', A, L] float32`` attention weights of each answer token (rows, answer-aligned, zero past
    the answer) over the padded key positions (zero on padding), heads in ``dense_heads[layer]`` order."""
    dense_heads: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Layer index -> the query heads of its ``dense`` block, in order."""
    layers: tuple[int, ...]
    """Indices of the scored layers, in the order of the ``NL`` axis."""
    answer_mask: torch.Tensor
    """``[B, A] bool``: True where answer token ``a`` exists for example ``b``."""
    answer_len: torch.Tensor
    """``[B] int64``: number of answer tokens of each example."""
    prompt_len: torch.Tensor
    """``[B] int64``: number of real (non-padding) tokens before the answer."""
    key_mask: torch.Tensor
    """``[B, L] bool``: True on real tokens of the padded input (columns are indexed by these keys)."""
    response_start: torch.Tensor | None = None
    """``[B] int64``: padded index of each example's first answer token (answer token ``a`` of
    example ``b`` sits at padded position ``response_start[b] + a``)."""
