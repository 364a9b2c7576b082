"""Per-forward recording state: what the scored layers compute and what they collected.

Everything that depends on the batch (masks, lengths, gather indices, sink positions) is computed
once per forward, on the device of the inputs, when the `Plan` is built; the attention
function only slices, calls the kernel and gathers (no host reads inside layers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

import torch
from flashstats_kernels import (
    AttentionResult,
    ColumnStats,
    LookupStats,
    RowStats,
    StatsRequest,
    dense_response_block,
    response_attention,
)

from flashstats_hf._packing import Packing, packed_attention, packed_response, unpack_result
from flashstats_hf._sdpa import base_attention, kernel_can_run, plain_attention, visibility
from flashstats_hf.pooling import column_topk
from flashstats_hf.types import ColumnTopK

_ACTIVE: ContextVar[Recorder | None] = ContextVar("flashstats_recorder", default=None)
_OPEN = [0]
"""Recorders open in any thread. While none is, the attention reads this plain global and never the
``ContextVar``, which ``torch.compile`` cannot trace: a compiled model outside ``record_forward`` is one
graph (Dynamo guards on the count, so opening a recorder recompiles rather than skipping it)."""
_OPEN_LOCK = threading.Lock()


def activate(recorder: Any) -> Token:
    """Make ``recorder`` the active one of this context (``Recorder`` or ``CachedRecorder``)."""
    token = _ACTIVE.set(recorder)
    with _OPEN_LOCK:
        _OPEN[0] += 1
    return token


def deactivate(token: Token) -> None:
    """Undo `activate`."""
    _ACTIVE.reset(token)
    with _OPEN_LOCK:
        _OPEN[0] -= 1


def active_recorder() -> Recorder | None:
    """The recorder of the forward running in this context, or None."""
    if _OPEN[0] == 0:
        return None
    return _ACTIVE.get()


@dataclass(frozen=True)
class Plan:
    """Runtime choices and per-batch tensors of one recorded forward.

    Shapes: ``B`` examples, ``L`` padded length, ``R`` response rows (the last ``R`` positions),
    ``A = R`` answer slots.
    """

    layers: frozenset[int]
    """Layer indices to score."""
    request: StatsRequest
    """Statistic families; ``sink_positions`` already resolved to a ``[B, S]`` tensor of padded positions."""
    length: int
    """Padded sequence length ``L``."""
    rows: int
    """Number of response rows ``R`` (the longest answer)."""
    key_mask: torch.Tensor | None
    """``[B, L] bool`` True on real tokens, or None on the unpadded fast path."""
    prompt_len: torch.Tensor | int
    """``[B] int64`` padded index of each example's first answer token (an int on the fast path)."""
    row_index: torch.Tensor
    """``[B, A] int64``: response row of answer token ``a`` (clamped to ``R - 1`` past the answer)."""
    answer_mask: torch.Tensor
    """``[B, A] bool``: True where answer token ``a`` exists."""
    backend: str = "auto"
    """Kernel backend (``"auto"``: Triton on CUDA, PyTorch on CPU)."""
    aligned: bool = False
    """True when answer slot ``a`` is response row ``a`` and every slot is real (one unpadded example):
    the row statistics are then used as the kernels return them, without a gather per field."""
    packing: Packing | None = None
    """The documents of a packed forward (one sequence of ``length`` tokens, no padding), or None."""
    dense_heads: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """Scored layer -> query heads whose response block is materialised (T4) in the same forward."""
    column_topk: int | None = None
    """Reduce each layer's column means to their ``K`` largest per head before the next layer runs
    (`flashstats_hf.pooling.column_topk`), dropping the full vectors; None keeps the full vectors."""


@dataclass
class LayerStats:
    """One scored layer's statistics, answer-aligned: rows ``[B, Hq, A]``, columns ``[B, Hq, L]`` or top-k."""

    rows: RowStats | None
    lookups: LookupStats | None
    columns: ColumnStats | None
    column_topk: ColumnTopK | None = None


def check_reached(planned: Iterable[int], reached: set[int], model: object) -> None:
    """Raise if a planned layer never called the ``"attnstats"`` attention during a model call.

    That happens when a model family computes attention itself instead of through Transformers'
    attention interface, when its attention modules carry no ``layer_idx``, or for the layers of a
    hybrid model that have no attention: such layers would otherwise come back silently unscored.
    """
    missing = sorted(i for i in planned if i not in reached)
    if missing:
        hint = (
            "leave them out with layers=... (layers without attention, as in hybrid models)"
            if reached
            else "this model computes attention itself instead of through Transformers' attention "
            "interface (ALL_ATTENTION_FUNCTIONS), or its attention modules have no `layer_idx`, so "
            "its statistics cannot be recorded"
        )
        raise RuntimeError(
            f"flashstats: layers {missing} of {type(model).__name__} never called the 'attnstats' "
            f"attention with their layer index; {hint}"
        )


def _joined(prompt: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """The layer's ``[B, Hq, L, D]`` output from its prompt and answer rows, stored token-major.

    The attention interface hands Transformers ``out.transpose(1, 2).contiguous()``: storing the rows as
    ``[B, L, Hq, D]`` (as SDPA's own output is) makes that a view, so the two parts are copied once, where
    a concatenation followed by that transpose would copy the whole output twice.
    """
    b, h, p, d = prompt.shape
    out = torch.empty(b, p + answer.shape[2], h, d, dtype=answer.dtype, device=answer.device).transpose(1, 2)
    out[:, :, :p] = prompt
    out[:, :, p:] = answer
    return out


@dataclass
class Recorder:
    """Context manager that makes the ``"attnstats"`` attention score the planned layers."""

    plan: Plan
    results: dict[int, LayerStats] = field(default_factory=dict)
    dense: dict[int, torch.Tensor] = field(default_factory=dict)
    """Layer -> ``[B, H', A, L] float32`` response block of its ``plan.dense_heads`` (answer-aligned)."""
    reached: set[int] = field(default_factory=set)
    """Layer indices whose attention called the ``"attnstats"`` function (scored or not)."""
    _masks: dict[tuple[str, int | None], torch.Tensor | None] = field(default_factory=dict)
    _token: Token[Recorder | None] | None = None

    def __enter__(self) -> Recorder:
        if _ACTIVE.get() is not None:
            raise RuntimeError("flashstats: record_forward calls cannot be nested")
        self._token = activate(self)
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            deactivate(self._token)
            self._token = None
        self._masks.clear()

    def wants(self, layer_idx: object) -> bool:
        """Whether the layer with this index is to be scored."""
        return isinstance(layer_idx, int) and layer_idx in self.plan.layers

    def check_reached(self, model: object) -> None:
        """Raise if a planned layer never reached the ``"attnstats"`` attention (see `check_reached`)."""
        check_reached(self.plan.layers, self.reached, model)

    def matches(self, query: torch.Tensor, key: torch.Tensor) -> bool:
        """Whether a layer call covers the recorded input (self-attention over all ``L`` positions)."""
        length = self.plan.length
        batch = 1 if self.plan.packing is not None else self.plan.row_index.shape[0]
        return query.shape[0] == batch and query.shape[2] == length == key.shape[2]

    def cannot_score(self, query: torch.Tensor, key: torch.Tensor, exotic: bool) -> str | None:
        """Why this layer call cannot be scored, or None when it can."""
        if exotic:
            return "non-causal attention, a position bias, or a mask pattern other than causal/sliding"
        if not self.matches(query, key):
            return "cross-attention or a cached call (queries and keys do not cover the recorded input)"
        return None

    def full_mask(self, window: int | None) -> torch.Tensor | None:
        """Visibility of every row (cached per window), None for plain causal attention."""
        return self._mask("full", window)

    def _mask(self, kind: str, window: int | None) -> torch.Tensor | None:
        if (kind, window) not in self._masks:
            n = self.plan.length if kind == "full" else self.plan.length - self.plan.rows
            keep = self.plan.key_mask
            if keep is None and window is None:
                mask = None
            else:
                pos = torch.arange(n, device=self.plan.row_index.device)
                mask = visibility(pos, n, None if keep is None else keep[:, :n], window)
            self._masks[(kind, window)] = mask
        return self._masks[(kind, window)]

    def score_layer(
        self,
        layer_idx: int,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        scale: float,
        softcap: float | None,
        window: int | None,
    ) -> torch.Tensor:
        """Split attention: prompt rows on the plain path, response rows on the kernel; ``[B, Hq, L, D]``.

        The plain path is SDPA, or the Base kernel for soft-capped and windowed layers.
        """
        plan = self.plan
        if plan.packing is not None:
            return self._score_packed(
                layer_idx, query, key, value, scale=scale, softcap=softcap, window=window
            )
        n_prompt = plan.length - plan.rows
        qp, kp, vp = query[:, :, :n_prompt], key[:, :, :n_prompt], value[:, :, :n_prompt]
        if kernel_can_run(qp, kp, softcap, window, 0.0):
            keep = None if plan.key_mask is None else plan.key_mask[:, :n_prompt]
            out_prompt = base_attention(
                qp, kp, vp, keep, scale=scale, softcap=softcap, window=window, backend=plan.backend
            )
        else:
            mask = self._mask("prompt", window)
            out_prompt = plain_attention(qp, kp, vp, mask, scale=scale, softcap=softcap)
        result = response_attention(
            query[:, :, n_prompt:],
            key,
            value,
            request=plan.request,
            key_mask=plan.key_mask,
            prompt_len=plan.prompt_len,
            scale=scale,
            softcap=softcap,
            window=window,
            backend=plan.backend,
        )
        self.results[layer_idx] = self._reduced(self._answer_aligned(result))
        self._keep_dense(layer_idx, query, key, scale=scale, softcap=softcap, window=window)
        return _joined(out_prompt, result.out)

    def _score_packed(self, layer_idx, query, key, value, *, scale, softcap, window) -> torch.Tensor:
        """Packed split: prompt rows within documents, every answer row in one call; ``[1, Hq, T, D]``."""
        plan = self.plan
        assert plan.packing is not None  # only packed plans come here
        options = {"scale": scale, "softcap": softcap, "window": window, "backend": plan.backend}
        out = packed_attention(plan.packing, query, key, value, prompt_only=True, **options)
        result = packed_response(plan.packing, query, key, value, request=plan.request, **options)
        out.index_copy_(0, plan.packing.answer_index, result.out)
        unpacked = LayerStats(*unpack_result(plan.packing, result, plan.answer_mask))
        self.results[layer_idx] = self._reduced(unpacked)
        self._keep_dense(layer_idx, query, key, scale=scale, softcap=softcap, window=window)
        return out[None].transpose(1, 2)

    def _reduced(self, stats: LayerStats) -> LayerStats:
        """``stats`` with its column vectors reduced to ``plan.column_topk`` means per head (if planned)."""
        k = self.plan.column_topk
        if k is None or stats.columns is None:
            return stats
        plan = self.plan
        if plan.packing is not None:  # columns come back in the left-padded layout of the batch
            j = torch.arange(plan.packing.key_index.shape[1], device=plan.packing.n_pad.device)
            keep: torch.Tensor | None = j[None, :] >= plan.packing.n_pad
        else:
            keep = plan.key_mask
        top = column_topk(stats.columns.mean, keep, k)
        return LayerStats(rows=stats.rows, lookups=stats.lookups, columns=None, column_topk=top)

    def _keep_dense(self, layer_idx, query, key, *, scale, softcap, window) -> None:
        """T4: the response block of the layer's chosen heads, answer-aligned, ``[B, H', A, L] float32``.

        Only ``plan.dense_heads[layer_idx]`` are materialised (``B * H' * R * L`` weights, plus the
        same again transiently for the softmax); keys are padded positions as for the columns. A
        packed forward gathers its documents back into the padded layout first.
        """
        heads = self.plan.dense_heads.get(layer_idx)
        if not heads:
            return
        plan = self.plan
        if plan.packing is None:
            q, k, keep = query[:, :, plan.length - plan.rows :], key, plan.key_mask
        else:
            index = plan.packing.key_index  # [B, L] packed position of padded key j
            length = index.shape[1]
            q = query[0][:, index[:, length - plan.rows :]].transpose(0, 1)  # [B, Hq, R, D]
            k = key[0][:, index].transpose(0, 1)  # [B, Hkv, L, D]
            keep = torch.arange(length, device=index.device)[None] >= plan.packing.n_pad  # [B, L]
        block = dense_response_block(
            q, k, key_mask=keep, scale=scale, softcap=softcap, window=window, heads=heads
        )  # [B, H', R, L]
        if not plan.aligned:
            idx = plan.row_index[:, None, :, None].expand(-1, block.shape[1], -1, block.shape[3])
            block = torch.where(plan.answer_mask[:, None, :, None], block.gather(2, idx), 0.0)
        self.dense[layer_idx] = block

    def plain_packed(self, query, key, value, *, scale, softcap, window) -> torch.Tensor:
        """Unscored attention of a packed forward, within documents: ``[1, Hq, T, D]``."""
        assert self.plan.packing is not None  # only packed plans come here
        out = packed_attention(
            self.plan.packing, query, key, value, scale=scale, softcap=softcap, window=window,
            backend=self.plan.backend, prompt_only=False,
        )  # fmt: skip
        return out[None].transpose(1, 2)

    def _answer_aligned(self, result: AttentionResult) -> LayerStats:
        """Moves row statistics from the response-row axis to the answer axis (zero past each answer)."""
        heads = result.lse.shape[1]
        index = self.plan.row_index[:, None, :].expand(-1, heads, -1)  # [B, Hq, A]
        keep = self.plan.answer_mask[:, None, :]  # [B, 1, A]

        def take(x: torch.Tensor) -> torch.Tensor:
            if self.plan.aligned:
                return x.float()
            if x.ndim == 4:  # sink weights [B, Hq, R, S]
                got = x.gather(2, index[..., None].expand(-1, -1, -1, x.shape[-1]))
                return torch.where(keep[..., None], got, 0.0).float()
            return torch.where(keep, x.gather(2, index), 0.0).float()

        rows = lookups = None
        if result.rows is not None:
            r = result.rows
            rows = RowStats(
                *(
                    take(t)
                    for t in (
                        r.entropy,
                        r.normalized_entropy,
                        r.prompt_mass,
                        r.max_weight,
                        r.effective_support,
                    )
                )
            )
        if result.lookups is not None:
            lk = result.lookups
            lookups = LookupStats(take(lk.diag_log), take(lk.prev_weight), take(lk.sink_weights))
        return LayerStats(rows=rows, lookups=lookups, columns=result.columns)
