"""CUDA-graph-captured recorded forwards: a fixed host cost per forward and no host reads inside it.

[`GraphedRecorder`][flashstats_hf.GraphedRecorder] captures, once per *shape bucket*, the decoder forward with
the ``"attnstats"`` attention scoring every chosen layer, plus the stacking of the statistics (and, in pooled
mode, their reduction on the GPU inside each layer). A later call in the same bucket copies the token ids
(and, with buckets, the example's length and answer length) into the graph's static inputs and replays it: the
Python of the model, of the attention interface and of the kernels' launchers does not run again, so the host
cost no longer grows with the number of layers.

Buckets: without ``buckets`` each exact ``(L, R)`` is its own graph (the unpadded fast path of
[`flashstats_hf.record_forward`][]). With ``buckets=(length_step, rows_step)`` an example is
left-padded to ``L_b`` (a multiple of ``length_step``) with ``R_b`` response rows (a multiple of
``rows_step``); masks, position ids, the first answer row, sink positions and the answer gather
indices are computed inside the graph from the two lengths, so one graph serves every example of
the bucket (the price: the prompt rows run masked SDPA). Results are the same as unpadded.

Scope: batch 1, CUDA decoders whose masks Transformers builds with ``create_causal_mask`` (Llama,
Qwen2/3, Mistral, Gemma 2/3 in Transformers 5); logit statistics, hidden states and the dense response
blocks of chosen heads (T4) in per-token mode.
Tuning and compilation happen in the warm-up runs before each capture. Everything the captured
kernels read (token ids, gather indices, sink positions) lives as long as its graph.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from flashstats_kernels import ColumnStats, LookupStats, RowStats, StatsRequest

from flashstats_hf._inputs import _decoder, _layer_indices
from flashstats_hf._packing import unpacked_positions
from flashstats_hf._recorder import LayerStats, Plan, Recorder
from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats
from flashstats_hf.logits import LOGIT_STAT_NAMES
from flashstats_hf.pooling import COLUMN_TOPK, POOL_NAMES, pool_tokens
from flashstats_hf.record import (
    DEFAULT_REQUEST,
    _check_topk,
    _dense_heads,
    _HiddenCapture,
    _logit_block_static,
    _query_heads,
    _stack_layers,
    _stack_topk,
)
from flashstats_hf.types import ColumnTopK, ForwardStats


@dataclass
class PooledStats:
    """Statistics of one forward pooled over the answer tokens (rows, lookups) or keys (columns).

    Shapes: ``NL`` scored layers, ``Hq`` query heads, ``S`` sinks; the last axis follows
    `POOL_NAMES`. Memory does not depend on the number of answer tokens.
    """

    layers: tuple[int, ...]
    """Indices of the scored layers, in the order of the ``NL`` axis."""
    rows: RowStats | None
    """Each field ``[1, NL, Hq, 4] float32``."""
    lookups: LookupStats | None
    """``diag_log``/``prev_weight`` ``[1, NL, Hq, 4]``, ``sink_weights`` ``[1, NL, Hq, S, 4]``."""
    columns: ColumnStats | None
    """``sum``/``mean`` over the keys ``[1, NL, Hq, 4]``."""


class _PoolingRecorder(Recorder):
    """A recorder that reduces each layer's statistics as soon as the layer has computed them.

    The fields of a family are stacked and reduced together (a few kernels per layer, not a few per
    field); answer slots past the answer and padding keys are left out of the reduction.
    """

    def _answer_aligned(self, result) -> LayerStats:
        per = super()._answer_aligned(result)
        plan = self.plan
        keep_a = None if plan.aligned else plan.answer_mask[:, None, :, None]  # [B, 1, A, 1]
        keep_k = None if plan.key_mask is None else plan.key_mask[:, None, :, None]  # [B, 1, L, 1]
        rows = lookups = columns = None
        if per.rows is not None:
            fields = [getattr(per.rows, f.name) for f in dataclasses.fields(RowStats)]
            rows = RowStats(*pool_tokens(torch.stack(fields, -1), 2, keep_a).unbind(2))  # each [B, Hq, 4]
        if per.lookups is not None:
            lk = per.lookups
            both = torch.cat([lk.diag_log[..., None], lk.prev_weight[..., None], lk.sink_weights], -1)
            pooled = pool_tokens(both, 2, keep_a)  # [B, Hq, 2 + S, 4]
            lookups = LookupStats(pooled[:, :, 0], pooled[:, :, 1], pooled[:, :, 2:])
        if per.columns is not None:
            pooled = pool_tokens(torch.stack([per.columns.sum, per.columns.mean], -1), 2, keep_k)
            columns = ColumnStats(pooled[:, :, 0], pooled[:, :, 1])
        return LayerStats(rows=rows, lookups=lookups, columns=columns)


def shape_plan(
    layers: Sequence[int],
    request: StatsRequest,
    length: int,
    rows: int,
    device: torch.device,
    *,
    backend: str = "triton",
) -> Plan:
    """The recording plan of one exact unpadded batch-1 shape ``(L, R)``.

    ``request.sink_positions`` must already be a ``[1, S]`` int64 tensor on ``device``.
    """
    return Plan(
        layers=frozenset(layers), request=request, length=length, rows=rows, key_mask=None,
        prompt_len=length - rows, row_index=torch.arange(rows, device=device)[None],
        answer_mask=torch.ones(1, rows, dtype=torch.bool, device=device), backend=backend, aligned=True,
    )  # fmt: skip


@dataclass
class BucketInputs:
    """The static inputs of a bucketed graph: what a call copies in before the replay."""

    ids: torch.Tensor
    """``[1, L_b] int64``: the example's tokens right-aligned, padding (token 0) before them."""
    length: torch.Tensor
    """``[1] int64``: the example's length ``L``."""
    rows: torch.Tensor
    """``[1] int64``: its answer length ``R``."""


def bucket_plan(
    layers: Sequence[int], request: StatsRequest, inputs: BucketInputs, rows: int, *, backend: str = "triton"
) -> tuple[Plan, torch.Tensor]:
    """The plan of one bucket ``(L_b, R_b)``, computed on the device from the example's two lengths.

    Args:
        layers: scored layer indices.
        request: statistic families; ``sink_positions`` a ``[1, S]`` int64 tensor counted from the
            example's first token.
        inputs: the bucket's static inputs (``L_b`` is ``inputs.ids.shape[1]``).
        rows: ``R_b``, the bucket's response rows (``R <= R_b < L_b``).
        backend: kernel backend.

    Returns:
        ``(plan, position_ids [1, L_b] int64)``; no host reads, so it can be captured.
    """
    lb, dev = inputs.ids.shape[1], inputs.ids.device
    pad = lb - inputs.length  # [1]
    pos = torch.arange(lb, device=dev)[None]
    slot = torch.arange(rows, device=dev)[None]
    sinks = torch.as_tensor(request.sink_positions, device=dev) + pad[:, None]  # padded positions
    plan = Plan(
        layers=frozenset(layers), length=lb, rows=rows, backend=backend,
        request=dataclasses.replace(request, sink_positions=sinks),
        key_mask=pos >= pad[:, None], prompt_len=lb - inputs.rows,
        row_index=(slot + (rows - inputs.rows)[:, None]).clamp(max=rows - 1),
        answer_mask=slot < inputs.rows[:, None],
    )  # fmt: skip
    return plan, (pos - pad[:, None]).clamp(min=0)


@dataclass
class _Answers:
    """Where the answer tokens are (what the hidden-state hooks and the logit block read)."""

    answer_pos: torch.Tensor  # [1, A] int64 position of answer slot a (clamped past the answer)
    answer_mask: torch.Tensor  # [1, A] bool


def _answers(plan: Plan) -> _Answers:
    """Positions of the plan's answer slots, computed on the device."""
    slot = torch.arange(plan.rows, device=plan.answer_mask.device)[None]
    start = plan.prompt_len if isinstance(plan.prompt_len, int) else plan.prompt_len[:, None]
    return _Answers((start + slot).clamp(max=plan.length - 1), plan.answer_mask)


def recorded_forward(
    model: torch.nn.Module,
    ids: torch.Tensor,
    plan: Plan,
    layers: Sequence[int],
    *,
    pooled: bool = False,
    position_ids: torch.Tensor | None = None,
    logits: bool = False,
    hidden_layers: Sequence[int] = (),
) -> tuple:
    """The work a graph captures: one forward with the planned layers scored, stacked, nothing read back.

    Runs eagerly too (on any device), which is how the CPU tests check what a capture records.

    Args:
        model: the causal LM (its body runs; its LM head only for ``logits``).
        ids: [1, L] int64 token ids.
        plan: the recording plan of this shape (`shape_plan` or `bucket_plan`).
        layers: scored layer indices, in output order.
        pooled: reduce every statistic to `POOL_NAMES` inside each layer.
        position_ids: [1, L] int64 (bucketed plans), or None for ``0 .. L - 1``.
        logits: compute the logit statistics (`LOGIT_STAT_NAMES`, V columns) on every answer slot.
        hidden_layers: hidden states to keep at the answer slots (indexed as in ``record_forward``).

    Returns:
        ``(rows, lookups, columns, logit_stats [1, A, V] | None, hidden [1, NH, A, Dm] | None, dense,
        column_topk)``, the attention families stacked over the scored layers (None for families not
        requested; ``columns`` None and ``column_topk`` ``[1, NL, Hq, K]`` when ``plan.column_topk`` reduces
        them) and ``dense``: layer -> ``[1, H', A, L] float32`` response block of ``plan.dense_heads``
        (empty without them).
    """
    body, decoder_layers = _decoder(model)
    answers = _answers(plan) if logits or hidden_layers else None  # hooks read it only with hidden layers
    recorder = (_PoolingRecorder if pooled else Recorder)(plan)
    hooks = _HiddenCapture(decoder_layers, tuple(hidden_layers), answers)
    with torch.no_grad(), recorder, unpacked_positions(), hooks:
        out = body(input_ids=ids, attention_mask=plan.key_mask, position_ids=position_ids, use_cache=False)
        stats = (
            _logit_block_static(model, out[0], ids, answers.answer_pos, plan.answer_mask)
            if answers is not None and logits
            else None
        )
        if len(decoder_layers) in hidden_layers:
            hooks._keep(len(decoder_layers), out[0])
    recorder.check_reached(model)
    hidden = torch.stack([hooks.states[i] for i in hidden_layers], dim=1) if hidden_layers else None
    done = [recorder.results[i] for i in layers if i in recorder.results]
    return (*_stack_layers(done), stats, hidden, dict(recorder.dense), _stack_topk(done))


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: BucketInputs  # static inputs (length/rows unused without buckets)
    plan: Plan  # the graph reads its tensors (gather indices, masks) on every replay: keep them alive
    out: tuple  # static outputs (rows, lookups, columns, logit_stats, hidden, dense, column_topk)


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def bucket_shape(length: int, rows: int, buckets: tuple[int, int] | None) -> tuple[int, int]:
    """The bucket ``(L_b, R_b)`` of an example with ``length`` tokens, the last ``rows`` the answer.

    ``R_b`` is ``rows`` rounded up to a multiple of ``buckets[1]``, ``L_b`` the larger of ``length`` and
    ``R_b + 1`` rounded up to a multiple of ``buckets[0]``; without buckets, the exact shape.
    """
    if buckets is None:
        return length, rows
    step_l, step_r = buckets
    rb = _round_up(rows, step_r)
    return _round_up(max(length, rb + 1), step_l), rb


class GraphedRecorder:
    """Recorded forwards replayed from CUDA graphs, one graph per shape bucket.

    Args:
        model: a Transformers causal LM on a CUDA device, in eval mode, with
            ``attn_implementation="attnstats"``.
        request: statistic families (default: [`flashstats_hf.DEFAULT_REQUEST`][]); sink
            positions count from the example's first token.
        layers: decoder layers to score (None: all).
        pooled: reduce every statistic on the GPU inside each layer
            ([`PooledStats`][flashstats_hf.PooledStats]) instead of returning per-token statistics
            ([`flashstats_hf.ForwardStats`][]).
        max_graphs: captured buckets kept (least recently used ones are dropped with their memory).
        buckets: ``(length_step, rows_step)`` to share one graph between examples whose lengths round
            up to the same multiples, or None for one graph per exact ``(L, R)``.
        logits: also compute the logit statistics (per-token mode only).
        hidden_layers: hidden states to keep at the answer tokens, indexed as in
            [`flashstats_hf.record_forward`][] (per-token mode only).
        dense_heads: T4 in the captured forward, as in [`flashstats_hf.record_forward`][]: scored
            layer -> query heads whose response block is materialised and returned in
            ``ForwardStats.dense`` (per-token mode only). Each graph keeps a static
            ``[1, H', R_b, L_b]`` float32 block per named layer.
        full_columns: keep the full column vectors in ``ForwardStats.columns`` (per-token mode); by
            default each layer's column means are reduced to ``column_topk`` per head inside the graph.
        column_topk: column means kept per head and layer when they are reduced.

    Raises:
        ValueError: on a model that is not on CUDA, not in eval mode or not using ``"attnstats"``,
            or on bad ``max_graphs`` / ``buckets`` / ``dense_heads``, or on ``pooled=True`` with
            logits, hidden states or dense heads.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        request: StatsRequest | None = None,
        layers: int | Sequence[int] | None = None,
        pooled: bool = False,
        max_graphs: int = 4,
        buckets: tuple[int, int] | None = None,
        logits: bool = False,
        hidden_layers: int | Sequence[int] | None = None,
        dense_heads: Mapping[int, Sequence[int]] | None = None,
        full_columns: bool = False,
        column_topk: int = COLUMN_TOPK,
    ) -> None:
        if buckets is not None and not (
            isinstance(buckets, tuple)
            and len(buckets) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in buckets)
        ):
            raise ValueError(
                f"buckets must be None or (length_step, rows_step) positive ints, got {buckets!r}"
            )
        if pooled and (logits or hidden_layers is not None or dense_heads is not None):
            raise ValueError(
                "pooled=True covers attention statistics only: pass logits=False, hidden_layers=None, "
                "dense_heads=None"
            )
        register_flashstats()
        device = next(model.parameters()).device
        if device.type != "cuda":
            raise ValueError(f"GraphedRecorder needs a model on a CUDA device, got {device}")
        if model.training or getattr(model.config, "_attn_implementation", None) != ATTN_IMPLEMENTATION:
            raise ValueError(f"model must be in eval mode with attn_implementation={ATTN_IMPLEMENTATION!r}")
        if not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"max_graphs must be a positive int, got {max_graphs!r}")
        self.model, self.device, self.pooled, self.max_graphs = model, device, pooled, max_graphs
        self.buckets = buckets
        self.column_topk = None if pooled else _check_topk(full_columns, column_topk)
        self.body, decoder_layers = _decoder(model)
        self.layers = _layer_indices(layers, len(decoder_layers), "layers")
        self.logits = bool(logits)
        self.hidden_layers = (
            ()
            if hidden_layers is None
            else _layer_indices(hidden_layers, len(decoder_layers) + 1, "hidden_layers")
        )
        self.dense_heads = _dense_heads(dense_heads, self.layers, len(decoder_layers), _query_heads(model))
        request = DEFAULT_REQUEST if request is None else request
        if not isinstance(request, StatsRequest):
            raise TypeError(f"request must be a StatsRequest or None, got {type(request).__name__}")
        sinks = request.sink_positions
        if not isinstance(sinks, torch.Tensor):
            sinks = torch.tensor([list(sinks)], dtype=torch.int64)
        self.request = dataclasses.replace(request, sink_positions=sinks.to(device).reshape(1, -1))
        self._graphs: OrderedDict[tuple[int, int], _Captured] = OrderedDict()

    def bucket(self, length: int, rows: int) -> tuple[int, int]:
        """The ``(L_b, R_b)`` graph that serves an example of ``length`` tokens and ``rows`` answer tokens."""
        return bucket_shape(length, rows, self.buckets)

    def _plan(self, length: int, rows: int) -> Plan:
        return shape_plan(self.layers, self.request, length, rows, self.device, backend="triton")

    def _run(self, inputs: BucketInputs, rows: int) -> tuple[Plan, tuple]:
        if self.buckets is None:
            plan, position_ids = self._plan(inputs.ids.shape[1], rows), None
        else:
            plan, position_ids = bucket_plan(self.layers, self.request, inputs, rows)
        plan = dataclasses.replace(plan, dense_heads=self.dense_heads, column_topk=self.column_topk)
        out = recorded_forward(
            self.model, inputs.ids, plan, self.layers, pooled=self.pooled, position_ids=position_ids,
            logits=self.logits, hidden_layers=self.hidden_layers,
        )  # fmt: skip
        return plan, out

    def _capture(self, length: int, rows: int) -> _Captured:
        dev = self.device
        inputs = BucketInputs(
            ids=torch.zeros(1, length, dtype=torch.int64, device=dev),
            length=torch.full((1,), length, dtype=torch.int64, device=dev),
            rows=torch.full((1,), rows, dtype=torch.int64, device=dev),
        )
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up: autotuning, compilation, lazy initialisation
            for _ in range(2):
                self._run(inputs, rows)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan, out = self._run(inputs, rows)
        return _Captured(graph=graph, inputs=inputs, plan=plan, out=out)

    def __call__(self, input_ids: torch.Tensor, *, response_start: int) -> ForwardStats | PooledStats:
        """Replays (capturing on first use) the recorded forward of one example.

        Args:
            input_ids: [1, L] int64 token ids ending with the answer (no padding).
            response_start: index of the first answer token, in ``[1, L - 1]``.

        Returns:
            [`flashstats_hf.ForwardStats`][] (per-token statistics, shapes as from
            [`flashstats_hf.record_forward`][] on this example alone, with the same ``logits`` and
            ``hidden_layers``) or
            [`PooledStats`][flashstats_hf.PooledStats]. The tensors are copies: later calls do not overwrite
            them.
        """
        check_graph_input(input_ids)
        length = input_ids.shape[1]
        if isinstance(response_start, bool) or not isinstance(response_start, int):
            raise TypeError(f"response_start must be an int, got {type(response_start).__name__}")
        if not 1 <= response_start <= length - 1:
            raise ValueError(
                f"response_start must lie in [1, L - 1] = [1, {length - 1}], got {response_start}"
            )
        rows = length - response_start
        key = self.bucket(length, rows)
        if key not in self._graphs:
            while len(self._graphs) >= self.max_graphs:
                self._graphs.popitem(last=False)
            self._graphs[key] = self._capture(*key)
        self._graphs.move_to_end(key)
        cap = self._graphs[key]
        if self.buckets is None:
            cap.inputs.ids.copy_(input_ids, non_blocking=True)
        else:
            cap.inputs.ids[:, : key[0] - length].zero_()
            cap.inputs.ids[:, key[0] - length :].copy_(input_ids, non_blocking=True)
            cap.inputs.length.fill_(length)
            cap.inputs.rows.fill_(rows)
        cap.graph.replay()
        if self.pooled:
            rows_, lookups, columns = (None if x is None else _clone(x) for x in cap.out[:3])
            return PooledStats(layers=self.layers, rows=rows_, lookups=lookups, columns=columns)
        return self._forward_stats(length, rows, key[0], *cap.out)

    def _forward_stats(self, length: int, rows: int, padded: int, *stats) -> ForwardStats:
        """Per-token statistics of the example (answer slots past ``rows`` and padding keys cut off)."""
        dev = self.device
        start = torch.full((1,), length - rows, device=dev)
        row_stats, lookups, columns, logit_stats, hidden, dense, top = stats
        if row_stats is not None:
            row_stats = RowStats(*(x[..., :rows].clone() for x in _values(row_stats)))
        if lookups is not None:
            lookups = LookupStats(
                lookups.diag_log[..., :rows].clone(),
                lookups.prev_weight[..., :rows].clone(),
                lookups.sink_weights[..., :rows, :].clone(),
            )
        if columns is not None:
            columns = ColumnStats(*(x[..., padded - length :].clone() for x in _values(columns)))
        if top is not None:  # key positions of the bucket move back by its padding
            shifted = torch.where(top.index >= 0, top.index - (padded - length), -1)
            top = ColumnTopK(top.values.clone(), shifted)
        return ForwardStats(
            layers=self.layers,
            answer_mask=torch.ones(1, rows, dtype=torch.bool, device=dev),
            answer_len=torch.full((1,), rows, device=dev),
            prompt_len=start.clone(),
            key_mask=torch.ones(1, length, dtype=torch.bool, device=dev),
            rows=row_stats,
            lookups=lookups,
            columns=columns,
            column_topk=top,
            logit_stats=None if logit_stats is None else logit_stats[:, :rows].clone(),
            logit_stat_names=LOGIT_STAT_NAMES if self.logits else (),
            hidden_layers=self.hidden_layers,
            hidden=None if hidden is None else hidden[:, :, :rows].clone(),
            response_start=start,
            dense={i: block[:, :, :rows, padded - length :].clone() for i, block in dense.items()},
            dense_heads={i: self.dense_heads[i] for i in dense},
        )


def check_graph_input(input_ids: object) -> None:
    """Raises unless ``input_ids`` is a ``[1, L]`` integer tensor with ``L >= 2``."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a [1, L] integer tensor, got {type(input_ids).__name__}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 2:
        raise ValueError(
            "input_ids must have shape [1, L] with L >= 2 (one example, no batching), "
            f"got {tuple(input_ids.shape)}"
        )


def _values(stats) -> list[torch.Tensor]:
    return [getattr(stats, f.name) for f in dataclasses.fields(stats)]


def _clone(stats):
    return type(stats)(*(x.clone() for x in _values(stats)))


__all__ = [
    "POOL_NAMES",
    "BucketInputs",
    "GraphedRecorder",
    "PooledStats",
    "bucket_plan",
    "bucket_shape",
    "recorded_forward",
    "shape_plan",
    "unpacked_positions",
]
