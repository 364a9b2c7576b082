"""One teacher-forced forward that returns attention, logit and hidden-state statistics of the answer."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch
from flashstats_kernels import ColumnStats, LookupStats, RowStats, StatsRequest

from flashstats_hf._inputs import (
    _as_batch,
    _Batch,
    _decoder,
    _layer_indices,
    check_causal_lm,
    check_token_ids,
)
from flashstats_hf._packing import Packing, build_packing, unpacked_positions
from flashstats_hf._recorder import LayerStats, Plan, Recorder
from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats
from flashstats_hf.logits import LOGIT_STAT_NAMES, logit_statistics
from flashstats_hf.pooling import COLUMN_TOPK
from flashstats_hf.types import ColumnTopK, ForwardStats

DEFAULT_REQUEST = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,))
"""Request used when ``record_forward`` gets none: every family, one sink at each example's first token."""

_LOGIT_CHUNK = 1024


def _resolve_request(request: object, batch: _Batch) -> StatsRequest:
    """The request with sink positions as a ``[B, S]`` tensor of padded positions.

    A tuple of sink positions counts from each example's first real token; a ``[B, S]`` tensor is
    taken as padded positions unchanged.
    """
    if request is None:
        request = DEFAULT_REQUEST
    if not isinstance(request, StatsRequest):
        raise TypeError(
            f"request must be a flashstats_kernels.StatsRequest or None, got {type(request).__name__}"
        )
    sinks = request.sink_positions
    b, device = batch.key_mask.shape[0], batch.key_mask.device
    if isinstance(sinks, torch.Tensor):
        if sinks.ndim != 2 or sinks.shape[0] != b:
            raise ValueError(
                f"request.sink_positions must be a tuple or a [B, S] = [{b}, S] tensor, got "
                f"{tuple(sinks.shape)}"
            )
        sinks = sinks.to(device=device, dtype=torch.int64)
    else:
        offsets = torch.tensor(tuple(sinks), dtype=torch.int64, device=device).reshape(1, -1)
        n_pad = batch.key_mask.shape[1] - batch.key_mask.sum(dim=1, keepdim=True)
        sinks = n_pad + offsets
    return dataclasses.replace(request, sink_positions=sinks)


class _AnswerSlots(Protocol):
    """Where the answer tokens are: what the hidden-state hooks read."""

    @property
    def answer_pos(self) -> torch.Tensor:
        """``[B, A] int64`` position of answer slot ``a``."""

    @property
    def answer_mask(self) -> torch.Tensor:
        """``[B, A] bool``: which slots hold an answer token."""


class _HiddenCapture:
    """Forward hooks that keep the states of the requested layers at the answer positions only."""

    def __init__(
        self, layers: torch.nn.ModuleList, indices: tuple[int, ...], batch: _AnswerSlots | None
    ) -> None:
        self.indices, self.batch, self.layers = indices, batch, layers
        self.states: dict[int, torch.Tensor] = {}
        self._handles: list = []

    def _keep(self, index: int, hidden: torch.Tensor) -> None:
        if self.batch is None:
            raise ValueError("hidden states were requested without answer positions")
        pos = self.batch.answer_pos[..., None].expand(-1, -1, hidden.shape[-1])  # [B, A, Dm]
        got = hidden.expand(pos.shape[0], -1, -1).gather(1, pos).float()  # packed: hidden is [1, T, Dm]
        self.states[index] = torch.where(self.batch.answer_mask[..., None], got, 0.0)

    def __enter__(self) -> _HiddenCapture:
        for index in self.indices:
            if index == len(self.layers):  # the final normed state: taken from the body's output
                continue
            if index == 0:

                def pre(module, args, kwargs, index=index):
                    self._keep(index, args[0] if args else kwargs["hidden_states"])

                handle = self.layers[0].register_forward_pre_hook(pre, with_kwargs=True)
            else:

                def post(module, args, output, index=index):
                    self._keep(index, output[0] if isinstance(output, tuple) else output)

                handle = self.layers[index - 1].register_forward_hook(post)
            self._handles.append(handle)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def _stack_layers(
    results: list[LayerStats],
) -> tuple[RowStats | None, LookupStats | None, ColumnStats | None]:
    """Stacks per-layer statistics on a new layer axis (dim 1): ``[B, NL, Hq, ...]``."""
    if not results:
        return None, None, None

    def stack(kind: type, attr: str):
        parts = [getattr(r, attr) for r in results]
        if any(p is None for p in parts):
            return None
        names = [f.name for f in dataclasses.fields(kind)]
        return kind(*(torch.stack([getattr(p, n) for p in parts], dim=1) for n in names))

    return stack(RowStats, "rows"), stack(LookupStats, "lookups"), stack(ColumnStats, "columns")


def _stack_topk(results: list[LayerStats]) -> ColumnTopK | None:
    """Stacks the per-layer reduced columns on a new layer axis: ``[B, NL, Hq, K]`` (None if absent)."""
    parts = [r.column_topk for r in results]
    if not parts or any(p is None for p in parts):
        return None
    return ColumnTopK(
        values=torch.stack([p.values for p in parts], dim=1),  # type: ignore[union-attr]
        index=torch.stack([p.index for p in parts], dim=1),  # type: ignore[union-attr]
    )


def _check_topk(full_columns: object, column_topk: object) -> int | None:
    """The plan's ``column_topk`` (None: keep the full vectors), after checking both arguments."""
    if not isinstance(full_columns, bool):
        raise TypeError(f"full_columns must be a bool, got {full_columns!r}")
    if isinstance(column_topk, bool) or not isinstance(column_topk, int) or column_topk < 1:
        raise ValueError(f"column_topk must be a positive int, got {column_topk!r}")
    return None if full_columns else column_topk


def _logit_rows(model: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[N, V] float32`` logit statistics from ``[N, Dm]`` states and the ``[N]`` tokens they predict.

    ``V = len(LOGIT_STAT_NAMES)``.

    The LM head runs in chunks of ``_LOGIT_CHUNK`` rows (full-vocabulary logits of every row at once
    would not fit for long answers); the model's logit scale and final logit soft-cap are applied
    when it has them (see `_logit_scale`).
    """
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is None:
        raise TypeError(f"logits=True needs a model with an LM head, got {type(model).__name__}")
    config = getattr(model, "config", None)
    cap = getattr(config.get_text_config(), "final_logit_softcapping", None) if config is not None else None
    factor = _logit_scale(model)
    parts = []
    for i in range(0, hidden.shape[0], _LOGIT_CHUNK):
        logits = head(hidden[i : i + _LOGIT_CHUNK]).float()
        if factor is not None:
            logits = logits * factor
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        parts.append(logit_statistics(logits, targets[i : i + _LOGIT_CHUNK]))
    return torch.cat(parts)


def _logit_scale(model: torch.nn.Module) -> float | None:
    """The factor by which the model's causal-LM forward scales the LM head's logits, or None.

    Cohere families multiply by ``logit_scale`` (an attribute of the LM); Granite families (and MiniCPM3,
    which divides the states before its bias-free head) divide by ``config.logits_scaling``, HyperCLOVA X
    multiplies by it.
    """
    scale = getattr(model, "logit_scale", None)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return float(scale)
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None else None
    scaling = getattr(text, "logits_scaling", None)
    if not isinstance(scaling, (int, float)) or isinstance(scaling, bool) or scaling == 1:
        return None
    return float(scaling) if getattr(text, "model_type", None) == "hyperclovax" else 1.0 / scaling


def _logit_block(
    model: torch.nn.Module, last: torch.Tensor, input_ids: torch.Tensor, batch: _Batch
) -> torch.Tensor:
    """``[B, A, V] float32`` statistics of the next-token distributions that predict answer tokens."""
    b = batch.answer_pos.shape[0]
    pos = (batch.answer_pos - 1)[..., None].expand(-1, -1, last.shape[-1])
    hidden = last.expand(b, -1, -1).gather(1, pos)[batch.answer_mask]  # [N, Dm] (packed: last is [1, T, Dm])
    targets = input_ids.expand(b, -1).gather(1, batch.answer_pos)[batch.answer_mask].long()  # [N]
    out = torch.zeros(*batch.answer_mask.shape, len(LOGIT_STAT_NAMES), device=last.device)
    out[batch.answer_mask] = _logit_rows(model, hidden, targets)
    return out


def _logit_block_static(
    model: torch.nn.Module,
    last: torch.Tensor,
    input_ids: torch.Tensor,
    answer_pos: torch.Tensor,
    answer_mask: torch.Tensor,
) -> torch.Tensor:
    """`_logit_block` with shapes fixed by ``A`` (no boolean indexing: it can be captured in a graph).

    Every answer slot gets the LM head, slots past the answer are zeroed: ``[B, A, V] float32``.
    """
    b, a = answer_pos.shape
    pos = (answer_pos - 1).clamp(min=0)[..., None].expand(-1, -1, last.shape[-1])
    hidden = last.gather(1, pos).reshape(b * a, -1)  # [B*A, Dm]
    targets = input_ids.gather(1, answer_pos).reshape(-1).long()  # [B*A]
    out = _logit_rows(model, hidden, targets).reshape(b, a, len(LOGIT_STAT_NAMES))
    return torch.where(answer_mask[..., None], out, 0.0)


def _packs(pack: object, model: torch.nn.Module, batch: _Batch) -> bool:
    """Whether to pack: as asked, or (None) for batches of several examples of a causal model."""
    if pack is None:
        return batch.key_mask.shape[0] > 1 and getattr(model.config, "is_causal", True) is not False
    if not isinstance(pack, bool):
        raise TypeError(f"pack must be None, True or False, got {pack!r}")
    return pack


def _run_body(
    model: torch.nn.Module,
    body: torch.nn.Module,
    layers: torch.nn.ModuleList,
    recorder: Recorder,
    inputs: dict,
    stop_after: int | None = None,
):
    """The body's forward (``out[0]``: the last hidden states; None when stopped after ``stop_after``).

    An error raised inside the decoder layers before any of them reached the ``"attnstats"`` attention
    gets a note that the family computes attention itself (as Bloom does, which then fails on the keep
    mask it was handed).
    """
    entered: list[bool] = []
    handle = (
        layers[0].register_forward_pre_hook(lambda module, args: entered.append(True)) if layers else None
    )
    stop = None if stop_after is None else layers[stop_after].register_forward_hook(_stop_forward)
    try:
        return body(**inputs, use_cache=False)
    except _StopForward:
        return None
    except Exception as exc:
        if entered and not recorder.reached:
            exc.add_note(
                f"flashstats: no layer of {type(model).__name__} called the 'attnstats' attention before "
                "this error; the model seems to compute attention itself instead of through Transformers' "
                "attention interface (ALL_ATTENTION_FUNCTIONS), so its statistics cannot be recorded"
            )
        raise
    finally:
        if handle is not None:
            handle.remove()
        if stop is not None:
            stop.remove()


class _StopForward(Exception):
    """Raised after the last decoder layer a forward needs; `_run_body` ends the forward there."""


def _stop_forward(module, args, output) -> None:
    raise _StopForward


def _last_layer_needed(
    count: int, scored: tuple[int, ...], kept: tuple[int, ...], logits: bool
) -> int | None:
    """The last decoder layer whose output a forward needs, or None when it needs them all.

    Without logit statistics and without the final normed state, nothing after the last scored layer
    and the last kept hidden state (index ``i`` = output of layer ``i - 1``) is read.
    """
    if logits or count in kept:
        return None
    last = max([*scored, *(k - 1 for k in kept)], default=0)
    return max(last, 0) if last < count - 1 else None


def _padded_plan(input_ids, scored, request: StatsRequest, batch: _Batch, backend: str) -> Plan:
    """The plan of a left-padded forward (the aligned fast path for one unpadded example)."""
    single = input_ids.shape[0] == 1 and not batch.padded
    return Plan(
        layers=frozenset(scored),
        request=request,
        length=input_ids.shape[1],
        rows=batch.rows,
        key_mask=batch.key_mask if batch.padded else None,
        prompt_len=int(batch.response_start[0]) if single else batch.response_start,
        row_index=batch.row_index,
        answer_mask=batch.answer_mask,
        backend=backend,
        aligned=single,
    )


def _packed_plan(packing: Packing, scored, request: StatsRequest, batch: _Batch, backend: str) -> Plan:
    """The plan of a packed forward: sink positions move from padded to per-document positions."""
    sinks = torch.as_tensor(request.sink_positions, device=packing.n_pad.device) - packing.n_pad
    return Plan(
        layers=frozenset(scored),
        request=dataclasses.replace(request, sink_positions=sinks),
        length=packing.input_ids.shape[1],
        rows=batch.rows,
        key_mask=None,
        prompt_len=packing.prompt_len,
        row_index=batch.row_index,
        answer_mask=batch.answer_mask,
        backend=backend,
        packing=packing,
    )


def record_forward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    response_start: int | Sequence[int] | torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    request: StatsRequest | None = None,
    layers: int | Sequence[int] | None = None,
    logits: bool = True,
    hidden_layers: int | Sequence[int] | None = None,
    backend: str = "auto",
    pack: bool | None = None,
    dense_heads: Mapping[int, Sequence[int]] | None = None,
    full_columns: bool = False,
    column_topk: int = COLUMN_TOPK,
) -> ForwardStats:
    """Runs one teacher-forced forward and returns the statistics of the answer tokens.

    The model must use the ``"attnstats"`` attention implementation ([`flashstats_hf.load_model`][]
    sets it; otherwise ``from_pretrained(..., attn_implementation="attnstats")`` or
    ``model.set_attn_implementation("attnstats")``) and be in eval mode. On each scored layer, prompt
    rows run on PyTorch SDPA and the last ``R`` rows (``R`` = longest answer) on
    [`flashstats_kernels.response_attention`][]; other layers run plain SDPA. Layers that cannot be
    scored (non-causal, cross-attention, custom mask patterns) run unscored with a warning and are
    left out of ``ForwardStats.layers``. The LM head is applied only at the positions that predict
    answer tokens.

    Args:
        model: a decoder-only Transformers causal LM (Llama, Qwen2/3, Mistral, Gemma2/3 text, ...).
        input_ids: [B, L] int64. Left-padded token ids; every example ends with its answer.
        response_start: int (also a NumPy integer or 0-d tensor) or [B] integers (a sequence, a NumPy array
            or a tensor). Padded index of each example's first answer token.
        attention_mask: [B, L] bool/int or None. 1 on real tokens, 0 on left padding (None: no padding).
        request: statistic families and sink positions. None: rows, lookups and columns with one
            sink at each example's first real token. Tuple sink positions count from each example's
            first real token; a ``[B, S]`` tensor gives padded positions.
        layers: indices of the decoder layers to score (negative ones count from the end); None
            scores every layer.
        logits: whether to compute the logit statistics ([`flashstats_hf.LOGIT_STAT_NAMES`][]).
        hidden_layers: hidden states to keep at answer tokens, indexed like Transformers'
            ``output_hidden_states``: 0 = embeddings, ``i`` = output of decoder layer ``i - 1``, the last
            index (``num_layers``) after the final norm; negative indices count from the end. None keeps none.
        backend: kernel backend: ``"auto"`` (Triton on CUDA, PyTorch on CPU), ``"torch"`` or ``"triton"``.
        pack: run the batch as one packed sequence of its examples (no padding, no attention mask;
            every layer attends within examples: the Base kernel on CUDA, SDPA example by example on
            the CPU), or as the left-padded batch. None packs batches of more than one example of a
            causal model. The statistics are the same either way; packing saves the padded work and
            the ``[B, 1, L, L]`` masks of a padded batch.
        dense_heads: T4 in the same forward: scored layer -> query heads whose response block (the
            softmax weights of the answer rows over all keys) is materialised while the layer runs and
            returned in ``ForwardStats.dense``. Only these heads are materialised: the blocks hold
            ``4 * B * A * L * sum_l |dense_heads[l]|`` bytes, and a layer adds transiently about as
            much again for its own heads' scores. None (default): no block.
        full_columns: keep every layer's full column vectors (``ForwardStats.columns``, ``[B, NL, Hq, L]``,
            memory growing with the context). False (default): each layer's column means are reduced to
            their ``column_topk`` largest per head (``ForwardStats.column_topk``) before the next layer.
        column_topk: column means kept per head and layer when the columns are reduced.

    Without ``logits`` and without the final hidden state, the forward stops after the last decoder layer
    it reads (the last scored layer or kept hidden state): the layers after it never run.

    Returns:
        ForwardStats with answer-aligned statistics (see [`flashstats_hf.ForwardStats`][]), on the
        model's device (inputs are moved there).

    Shape:
        - rows / lookups: ``[B, NL, Hq, A]`` (sinks ``[B, NL, Hq, A, S]``), column_topk ``[B, NL, Hq, K]``
          (columns ``[B, NL, Hq, L]`` with ``full_columns``),
          logit_stats ``[B, A, V]`` (``V = len(LOGIT_STAT_NAMES) = 56``), hidden ``[B, NH, A, Dm]``, with
          ``A`` the longest answer.
    """
    register_flashstats()
    check_causal_lm(model, "record_forward")
    if getattr(model.config, "_attn_implementation", None) != ATTN_IMPLEMENTATION:
        raise ValueError(
            f"model must use attn_implementation={ATTN_IMPLEMENTATION!r}, got "
            f"{getattr(model.config, '_attn_implementation', None)!r}: load it with "
            f"attn_implementation={ATTN_IMPLEMENTATION!r} or call model.set_attn_implementation(...)"
        )
    if model.training:
        raise ValueError("model must be in eval mode (call model.eval()) for record_forward")
    body, decoder_layers = _decoder(model)
    device = next(model.parameters()).device
    if isinstance(input_ids, torch.Tensor):
        input_ids = input_ids.to(device)
    batch = _as_batch(input_ids, response_start, attention_mask)
    check_token_ids(input_ids, model)
    scored = _layer_indices(layers, len(decoder_layers), "layers")
    kept = (
        ()
        if hidden_layers is None
        else _layer_indices(hidden_layers, len(decoder_layers) + 1, "hidden_layers")
    )
    resolved = _resolve_request(request, batch)
    topk = _check_topk(full_columns, column_topk)
    dense = _dense_heads(dense_heads, scored, len(decoder_layers), _query_heads(model))
    if _packs(pack, model, batch):
        packing = build_packing(input_ids, batch.key_mask, batch.prompt_len, batch.answer_len)
        plan = _packed_plan(packing, scored, resolved, batch, backend)
        ids, seen = packing.input_ids, dataclasses.replace(batch, answer_pos=packing.answer_pos)
        inputs = {"input_ids": ids, "attention_mask": None, "position_ids": packing.position_ids}
    else:
        plan = _padded_plan(input_ids, scored, resolved, batch, backend)
        ids, seen = input_ids, batch
        position_ids = (batch.key_mask.long().cumsum(dim=1) - 1).clamp(min=0) if batch.padded else None
        inputs = {"input_ids": ids, "attention_mask": batch.key_mask if batch.padded else None}
        inputs["position_ids"] = position_ids
    recorder = Recorder(dataclasses.replace(plan, dense_heads=dense, column_topk=topk))
    packed = contextlib.nullcontext() if plan.packing is None else unpacked_positions()
    with torch.no_grad(), recorder, packed, _HiddenCapture(decoder_layers, kept, seen) as capture:
        stop_after = _last_layer_needed(len(decoder_layers), scored, kept, logits)
        out = _run_body(model, body, decoder_layers, recorder, inputs, stop_after)
        logit_stats = _logit_block(model, out[0], ids, seen) if logits else None
        if len(decoder_layers) in kept:
            capture._keep(len(decoder_layers), out[0])
    recorder.check_reached(model)
    done = tuple(i for i in scored if i in recorder.results)
    rows, lookups, columns = _stack_layers([recorder.results[i] for i in done])
    top = _stack_topk([recorder.results[i] for i in done])
    return ForwardStats(
        layers=done,
        answer_mask=batch.answer_mask,
        answer_len=batch.answer_len,
        prompt_len=batch.prompt_len,
        key_mask=batch.key_mask,
        rows=rows,
        lookups=lookups,
        columns=columns,
        column_topk=top,
        logit_stats=logit_stats,
        logit_stat_names=LOGIT_STAT_NAMES if logits else (),
        hidden_layers=kept,
        hidden=torch.stack([capture.states[i] for i in kept], dim=1) if kept else None,
        response_start=batch.response_start,
        dense={i: recorder.dense[i] for i in done if i in recorder.dense},
        dense_heads={i: dense[i] for i in done if i in dense},
    )


def _query_heads(model: torch.nn.Module) -> int | None:
    """Number of query heads of the model's attention (None when the config does not say)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if config is not None else None
    heads = getattr(text, "num_attention_heads", None)
    return heads if isinstance(heads, int) else None


def _dense_heads(
    value: object, scored: tuple[int, ...], count: int, q_heads: int | None
) -> dict[int, tuple[int, ...]]:
    """``record_forward(dense_heads=...)`` checked: scored layer index -> query heads, in order."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"dense_heads must be None or a mapping layer -> heads, got {type(value).__name__}")
    out: dict[int, tuple[int, ...]] = {}
    for layer, heads in value.items():
        (index,) = _layer_indices(layer, count, "dense_heads layers")
        if index not in scored:
            raise ValueError(f"dense_heads names layer {layer}, which is not scored (layers={list(scored)})")
        if (
            isinstance(heads, int)
            or not isinstance(heads, Sequence)
            or not heads
            or not all(isinstance(h, int) and not isinstance(h, bool) for h in heads)
        ):
            raise TypeError(
                f"dense_heads[{layer}] must be a non-empty sequence of head indices, got {heads!r}"
            )
        if q_heads is not None and any(not 0 <= h < q_heads for h in heads):
            raise ValueError(f"dense_heads[{layer}] must lie in [0, {q_heads}), got {list(heads)}")
        out[index] = tuple(heads)
    return out
