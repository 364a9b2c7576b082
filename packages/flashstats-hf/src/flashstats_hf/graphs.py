"""CUDA-graph-captured recorded forwards: a fixed host cost per forward and no host reads inside it.

:class:`GraphedRecorder` captures, once per input shape (a *shape bucket*: sequence length ``L`` and
response rows ``R``), the decoder forward with the ``"attnstats"`` attention scoring every chosen
layer, plus the stacking of the statistics (and, in pooled mode, their reduction on the GPU inside
each layer). A later call with the same shape copies the token ids into the graph's static input
and replays it: the Python of the model, of the attention interface and of the kernels' launchers
does not run again, so the host cost no longer grows with the number of layers.

Scope: batch 1 without padding (the unpadded fast path of :func:`flashstats_hf.record_forward`),
CUDA decoders whose masks Transformers builds with ``create_causal_mask`` (Llama, Qwen2/3, Mistral,
Gemma 2/3 in Transformers 5), no logit statistics or hidden states. Tuning and compilation happen in
the warm-up runs before each capture. Everything the captured kernels read (token ids, gather
indices, sink positions) lives as long as its graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from flashstats_kernels import ColumnStats, LookupStats, RowStats, StatsRequest
from transformers import masking_utils

from flashstats_hf._recorder import LayerStats, Plan, Recorder
from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats
from flashstats_hf.record import DEFAULT_REQUEST, _decoder, _layer_indices, _stack_layers
from flashstats_hf.types import ForwardStats


@contextlib.contextmanager
def unpacked_positions() -> Iterator[None]:
    """Tells Transformers' mask builder, while a forward is captured, that the input is not a packed batch.

    Without an attention mask, Transformers checks the position ids for packed sequences, which needs a
    host read; while a CUDA graph is being captured it skips the read and assumes packing, then builds a
    dense packed-sequence mask. The attention cannot score layers under such a mask, and the plain rows
    fall to a slow masked SDPA path. Our captures are batch 1 with default position ids (``0 .. L - 1``),
    never packed, so inside this context the check answers "not packed" without looking.
    """
    fn = getattr(masking_utils, "find_packed_sequence_indices", None)
    if fn is None:  # a Transformers version without the check: nothing to do
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = fn


POOL_NAMES = ("mean", "std", "min", "max")
"""Order of the last axis of pooled statistics."""


@dataclass
class PooledStats:
    """Statistics of one forward pooled over the answer tokens (rows, lookups) or keys (columns).

    Shapes: ``NL`` scored layers, ``Hq`` query heads, ``S`` sinks; the last axis follows
    :data:`POOL_NAMES`. Memory does not depend on the number of answer tokens.
    """

    layers: tuple[int, ...]
    rows: RowStats | None
    """Each field ``[1, NL, Hq, 4] float32``."""
    lookups: LookupStats | None
    """``diag_log``/``prev_weight`` ``[1, NL, Hq, 4]``, ``sink_weights`` ``[1, NL, Hq, S, 4]``."""
    columns: ColumnStats | None
    """``sum``/``mean`` over the keys ``[1, NL, Hq, 4]``."""


def _pool(x: torch.Tensor, dim: int) -> torch.Tensor:
    """mean, std (population), min, max of ``x`` along ``dim``, stacked on a new last axis."""
    mean = x.mean(dim)
    std = (x - mean.unsqueeze(dim)).square().mean(dim).sqrt()
    return torch.stack([mean, std, x.amin(dim), x.amax(dim)], dim=-1)


class _PoolingRecorder(Recorder):
    """A recorder that reduces each layer's statistics as soon as the layer has computed them."""

    def _answer_aligned(self, result) -> LayerStats:
        per = super()._answer_aligned(result)
        rows = lookups = columns = None
        if per.rows is not None:
            rows = RowStats(*(_pool(getattr(per.rows, f.name), 2) for f in dataclasses.fields(RowStats)))
        if per.lookups is not None:
            lk = per.lookups
            lookups = LookupStats(_pool(lk.diag_log, 2), _pool(lk.prev_weight, 2), _pool(lk.sink_weights, 2))
        if per.columns is not None:
            columns = ColumnStats(_pool(per.columns.sum, 2), _pool(per.columns.mean, 2))
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
    """The recording plan of one unpadded batch-1 shape bucket ``(L, R)``.

    ``request.sink_positions`` must already be a ``[1, S]`` int64 tensor on ``device``. The plan's
    tensors (answer index ``arange(R)``, all-true answer mask) are what a captured graph reads.
    """
    return Plan(
        layers=frozenset(layers), request=request, length=length, rows=rows, key_mask=None,
        prompt_len=length - rows, row_index=torch.arange(rows, device=device)[None],
        answer_mask=torch.ones(1, rows, dtype=torch.bool, device=device), backend=backend,
    )  # fmt: skip


def recorded_body(
    body: torch.nn.Module, ids: torch.Tensor, plan: Plan, layers: Sequence[int], *, pooled: bool
) -> tuple:
    """The work a graph captures: one decoder forward with the planned layers scored, stacked.

    Runs eagerly too (on any device), which is how the CPU tests check what a capture records.

    Args:
        body: the decoder (``model.model``).
        ids: [1, L] int64 token ids.
        plan: the recording plan of this shape (unpadded, ``key_mask=None``).
        layers: scored layer indices, in output order.
        pooled: reduce every statistic to :data:`POOL_NAMES` inside each layer.

    Returns:
        ``(rows, lookups, columns)`` stacked over the scored layers (None for families not requested).
    """
    recorder = (_PoolingRecorder if pooled else Recorder)(plan)
    with torch.no_grad(), recorder, unpacked_positions():
        body(input_ids=ids, use_cache=False)
    return _stack_layers([recorder.results[i] for i in layers if i in recorder.results])


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor  # [1, L] static input
    plan: Plan  # the graph reads its tensors (gather indices, masks) on every replay: keep them alive
    out: tuple  # static outputs (rows, lookups, columns)


class GraphedRecorder:
    """Recorded forwards replayed from CUDA graphs, one graph per ``(L, R)`` shape bucket.

    Args:
        model: a Transformers causal LM on a CUDA device, in eval mode, with
            ``attn_implementation="attnstats"``.
        request: statistic families (default: :data:`flashstats_hf.DEFAULT_REQUEST`); tuple sink
            positions count from the first token.
        layers: decoder layers to score (None: all).
        pooled: reduce every statistic on the GPU inside each layer (:class:`PooledStats`) instead of
            returning per-token statistics (:class:`flashstats_hf.ForwardStats`).
        max_graphs: captured shapes kept (least recently used ones are dropped with their memory).

    Raises:
        ValueError: on a model that is not on CUDA, not in eval mode or not using ``"attnstats"``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        request: StatsRequest | None = None,
        layers: int | Sequence[int] | None = None,
        pooled: bool = False,
        max_graphs: int = 4,
    ) -> None:
        register_flashstats()
        device = next(model.parameters()).device
        if device.type != "cuda":
            raise ValueError(f"GraphedRecorder needs a model on a CUDA device, got {device}")
        if model.training or getattr(model.config, "_attn_implementation", None) != ATTN_IMPLEMENTATION:
            raise ValueError(f"model must be in eval mode with attn_implementation={ATTN_IMPLEMENTATION!r}")
        if not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"max_graphs must be a positive int, got {max_graphs!r}")
        self.model, self.device, self.pooled, self.max_graphs = model, device, pooled, max_graphs
        self.body, decoder_layers = _decoder(model)
        self.layers = _layer_indices(layers, len(decoder_layers), "layers")
        request = DEFAULT_REQUEST if request is None else request
        if not isinstance(request, StatsRequest):
            raise TypeError(f"request must be a StatsRequest or None, got {type(request).__name__}")
        sinks = request.sink_positions
        if not isinstance(sinks, torch.Tensor):
            sinks = torch.tensor([list(sinks)], dtype=torch.int64)
        self.request = dataclasses.replace(request, sink_positions=sinks.to(device).reshape(1, -1))
        self._graphs: OrderedDict[tuple[int, int], _Captured] = OrderedDict()

    def _plan(self, length: int, rows: int) -> Plan:
        return shape_plan(self.layers, self.request, length, rows, self.device, backend="triton")

    def _run(self, ids: torch.Tensor, plan: Plan) -> tuple:
        return recorded_body(self.body, ids, plan, self.layers, pooled=self.pooled)

    def _capture(self, length: int, rows: int) -> _Captured:
        ids = torch.zeros(1, length, dtype=torch.int64, device=self.device)
        plan = self._plan(length, rows)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up: autotuning, compilation, lazy initialisation
            for _ in range(2):
                self._run(ids, plan)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._run(ids, plan)
        return _Captured(graph=graph, ids=ids, plan=plan, out=out)

    def __call__(self, input_ids: torch.Tensor, *, response_start: int) -> ForwardStats | PooledStats:
        """Replays (capturing on first use) the recorded forward of one unpadded example.

        Args:
            input_ids: [1, L] int64 token ids ending with the answer.
            response_start: index of the first answer token, in ``[1, L - 1]``.

        Returns:
            :class:`flashstats_hf.ForwardStats` (per-token statistics, shapes as from
            :func:`flashstats_hf.record_forward` with ``logits=False``) or :class:`PooledStats`. The
            tensors are copies: later calls do not overwrite them.
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"input_ids must be a [1, L] integer tensor, got {input_ids!r:.80}")
        length = input_ids.shape[1]
        if isinstance(response_start, bool) or not isinstance(response_start, int):
            raise TypeError(f"response_start must be an int, got {type(response_start).__name__}")
        if not 1 <= response_start <= length - 1:
            raise ValueError(
                f"response_start must lie in [1, L - 1] = [1, {length - 1}], got {response_start}"
            )
        key = (length, length - response_start)
        if key not in self._graphs:
            while len(self._graphs) >= self.max_graphs:
                self._graphs.popitem(last=False)
            self._graphs[key] = self._capture(*key)
        self._graphs.move_to_end(key)
        cap = self._graphs[key]
        cap.ids.copy_(input_ids, non_blocking=True)
        cap.graph.replay()
        rows, lookups, columns = (None if x is None else _clone(x) for x in cap.out)
        if self.pooled:
            return PooledStats(layers=self.layers, rows=rows, lookups=lookups, columns=columns)
        return self._forward_stats(length, key[1], rows, lookups, columns)

    def _forward_stats(self, length: int, rows: int, *stats) -> ForwardStats:
        dev = self.device
        start = torch.full((1,), length - rows, device=dev)
        return ForwardStats(
            layers=self.layers,
            answer_mask=torch.ones(1, rows, dtype=torch.bool, device=dev),
            answer_len=torch.full((1,), rows, device=dev),
            prompt_len=start.clone(),
            key_mask=torch.ones(1, length, dtype=torch.bool, device=dev),
            rows=stats[0],
            lookups=stats[1],
            columns=stats[2],
            response_start=start,
        )


def _clone(stats):
    return type(stats)(*(getattr(stats, f.name).clone() for f in dataclasses.fields(stats)))


__all__ = ["POOL_NAMES", "GraphedRecorder", "PooledStats", "unpacked_positions"]
