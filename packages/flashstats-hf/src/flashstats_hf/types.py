"""Typed results of one recorded teacher-forced forward (the contract with halluprobe).

Shapes: ``B`` examples, ``NL`` scored layers, ``Hq`` query heads, ``A`` answer tokens (the longest
answer in the batch; shorter answers are padded and masked by ``answer_mask``), ``L`` sequence length
(padded), ``S`` sink positions, ``V`` logit statistics, ``NH`` hidden layers, ``Dm`` model width.
Answer token ``a`` of example ``b`` is the ``a``-th token of that example's answer (left-aligned on
the ``A`` axis whatever the padding of the input).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch
from flashstats_kernels.types import ColumnStats, LookupStats, RowStats


def _shape(x: torch.Tensor) -> str:
    return f"[{', '.join(str(n) for n in x.shape)}]"


def _family(name: str, stats: object) -> str:
    """``name: field [shape], ...`` of a statistic dataclass (fields of one shape share it)."""
    parts: dict[str, list[str]] = {}
    for f in fields(stats):  # type: ignore[arg-type]
        parts.setdefault(_shape(getattr(stats, f.name)), []).append(f.name)
    return f"{name}: " + "; ".join(f"{', '.join(names)} {shape}" for shape, names in parts.items())


@dataclass
class ColumnTopK:
    """The ``K`` largest column means ``c̄_j`` of each head over the real keys, descending (T3, reduced).

    What a forward keeps of the column statistics unless the full vectors are asked for: each scored
    layer's ``[B, Hq, L]`` means are reduced to these before the next layer runs. Shapes: ``[B, NL, Hq, K]``
    from a forward (``[B, Hq, K]`` for one layer).
    """

    values: torch.Tensor
    """float32 column means, largest first; 0 past the example's real keys (when it has fewer than ``K``)."""
    index: torch.Tensor
    """int64 padded key position of each value (indexes ``key_mask``'s axis); -1 past the real keys."""


@dataclass(kw_only=True, repr=False)
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
    """T3 over answer rows, full vectors: ``sum``/``mean`` ``[B, NL, Hq, L] float32`` indexed by padded key
    position. Only when asked for (``record_forward(..., full_columns=True)``); otherwise None and the
    columns come reduced in ``column_topk``."""
    column_topk: ColumnTopK | None = None
    """T3 reduced inside each layer: the ``K`` largest column means of each head, ``[B, NL, Hq, K]``
    (None without columns, or when the full vectors were kept in ``columns``)."""
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

    def __repr__(self) -> str:
        """A few lines: the batch layout, each statistic present with its shape, and those absent.

        No tensor values are printed (``print(fs.rows.entropy)`` shows one).
        """
        b, a = self.answer_mask.shape
        head = (
            f"ForwardStats(B={b}, A={a}, L={self.key_mask.shape[-1]}, layers={self.layers}, "
            f"device={self.answer_mask.device}"
        )
        lines, absent = [], []
        for name in ("rows", "lookups", "columns"):
            stats = getattr(self, name)
            if stats is None:
                if not (name == "columns" and self.column_topk is not None):  # reduced, not absent
                    absent.append(name)
            else:
                lines.append(_family(name, stats))
        if self.column_topk is not None:
            lines.append(f"column_topk: values, index {_shape(self.column_topk.values)}")
        if self.logit_stats is None:
            absent.append("logit_stats")
        else:
            lines.append(f"logit_stats: {_shape(self.logit_stats)} ({len(self.logit_stat_names)} names)")
        if self.hidden is None:
            absent.append("hidden")
        else:
            lines.append(f"hidden: {_shape(self.hidden)} at hidden_layers {self.hidden_layers}")
        if self.dense:
            lines.append(
                "dense: " + ", ".join(f"layer {i} heads {self.dense_heads.get(i, ())}" for i in self.dense)
            )
        else:
            absent.append("dense")
        if absent:
            lines.append(f"absent: {', '.join(absent)}")
        return head + "".join(f"\n  {line}" for line in lines) + ")"
