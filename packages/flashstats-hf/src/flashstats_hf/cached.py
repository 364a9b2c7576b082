"""Statistics while the model runs with a KV cache: generation steps and answer chunks as they arrive.

[`CachedRecorder`][flashstats_hf.CachedRecorder] makes the ``"attnstats"`` attention score the answer rows of
every cached call of a model (``model.generate`` steps, or chunks fed with
[`CachedRecorder.feed`][flashstats_hf.CachedRecorder.feed]) with [`flashstats_kernels.decode_attention`][]: T1
and T2 per new row, T3 added to a running column state per layer, logit statistics from the logits the model
already computes, and hidden states at the answer rows. After any number of calls,
[`CachedRecorder.stats`][flashstats_hf.CachedRecorder.stats] equals [`flashstats_hf.record_forward`][] on the
same token ids (prompt then answer so far), field by field.

Bookkeeping lives on the device (the token count, the answer slots, the buffers the statistics are
written into), so a decode step on a `transformers.StaticCache` can be captured in a CUDA graph;
the host keeps a mirror of the token count for the shapes of `stats` and for caches whose key
window moves (sliding-window layers), which cannot be captured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextvars import Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from flashstats_kernels import (
    ColumnState,
    LookupStats,
    RowStats,
    RowTargets,
    StatsRequest,
    decode_attention,
)

from flashstats_hf._inputs import _decoder, _layer_indices, check_causal_lm, check_token_ids, key_mask_of
from flashstats_hf._recorder import _ACTIVE, activate, check_reached, deactivate
from flashstats_hf._sdpa import plain_attention, visibility
from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats
from flashstats_hf.logits import LOGIT_STAT_NAMES, logit_statistics
from flashstats_hf.record import DEFAULT_REQUEST
from flashstats_hf.types import ForwardStats

if TYPE_CHECKING:
    from transformers import Cache, PretrainedConfig


@dataclass
class _Buffers:
    """Per-answer-token outputs (``A`` slots, grown on demand) and per-key running state (``L`` slots)."""

    rows: torch.Tensor  # [5, B, NL, Hq, A]
    diag_prev: torch.Tensor  # [2, B, NL, Hq, A]
    sinks: torch.Tensor  # [B, NL, Hq, A, S]
    logits: torch.Tensor  # [B, A, V] (V = len(LOGIT_STAT_NAMES))
    hidden: torch.Tensor  # [B, NH, A, Dm]
    columns: list[ColumnState]  # one per scored layer, [B, Hq, L]
    key_mask: torch.Tensor  # [B, L] bool, True on real tokens (answer tokens are always real)


@dataclass
class _Call:
    """One model call: its tokens and sizes, and the device tensors every scored layer shares."""

    ids: torch.Tensor  # [B, q]
    q: int
    n_p: int  # prompt rows of the call
    total: int  # tokens in the cache after the call
    plain_prompt: bool  # a prefill from the start without padding (SDPA's causal kernel)
    kv_len: torch.Tensor  # [1] int64 on the device: valid keys after the call
    slots: torch.Tensor  # [q - n_p] int64 on the device: answer slots of the call's answer rows
    requests: dict[int, StatsRequest] = field(default_factory=dict)  # per cache offset


def _grow(x: torch.Tensor, dim: int, size: int, fill: float | bool = 0) -> torch.Tensor:
    """``x`` padded with ``fill`` along ``dim`` to ``size`` (unchanged when already as large)."""
    if x.shape[dim] >= size:
        return x
    shape = list(x.shape)
    shape[dim] = size - x.shape[dim]
    return torch.cat([x, torch.full(shape, fill, dtype=x.dtype, device=x.device)], dim)


def _prompt_keep(mask: object, batch: int, prompt_len: int) -> torch.Tensor:
    """``[B, P] bool`` real prompt tokens from the mask a prefill call receives.

    Callers hand over a ``[B, >= P]`` 0/1 mask, a dict of prepared masks per layer type (``generate``
    with a static cache), or a prepared ``[B, 1, q, L]`` mask (bool, or float with large negatives);
    the last prompt row of a prepared causal mask sees exactly the real prompt keys.
    """
    if isinstance(mask, dict):
        mask = mask.get("full_attention", next(iter(mask.values()), None))
    if mask is None:
        return torch.ones(batch, prompt_len, dtype=torch.bool)
    if not isinstance(mask, torch.Tensor) or mask.ndim not in (2, 4):
        raise ValueError(f"expected a [B, L] or [B, 1, q, L] attention mask, got {type(mask).__name__}")
    if mask.ndim == 4:
        mask = mask[:, 0, prompt_len - 1]
        if mask.dtype != torch.bool and mask.is_floating_point():
            mask = mask > torch.finfo(mask.dtype).min / 2
        mask = mask.to(torch.bool)
    # the checks of record_forward: 0/1 values, left padding, every prompt ending on a real token
    return key_mask_of(mask[:, :prompt_len], (batch, prompt_len), mask.device)


class CachedRecorder:
    """Answer-token statistics of a model that runs with a KV cache (generation or streamed chunks).

    Use it as a context manager around ``model.generate(...)`` (greedy or sampling, any Transformers
    cache) or around [`feed`][flashstats_hf.CachedRecorder.feed] calls. Positions ``>= prompt_len`` are answer
    tokens; the prompt rows run unscored, as in [`flashstats_hf.record_forward`][]. Inputs are left-padded:
    every example's prompt ends at ``prompt_len``.

    Args:
        model: a decoder-only causal LM with ``attn_implementation="attnstats"``, in eval mode.
        prompt_len: padded index of the first answer token (the prompt length ``P``).
        request: statistic families; tuple sink positions count from each example's first real token,
            a ``[B, S]`` tensor gives padded positions (default [`flashstats_hf.DEFAULT_REQUEST`][]).
        layers: decoder layers to score (None: all).
        logits: compute the seven logit statistics (from the logits the model returns).
        hidden_layers: hidden states to keep at answer tokens, indexed as in ``record_forward``.
        cache: the cache [`feed`][flashstats_hf.CachedRecorder.feed] uses (None: a ``DynamicCache`` made on
            the first call); calls made by others (``generate``) use theirs.
        capacity: answer tokens to allocate for up front (buffers grow when exceeded, except inside a
            CUDA-graph capture: give the largest answer then).
        backend: kernel backend (``"auto"``: Triton on CUDA, PyTorch on CPU).

    After a prompt's first call, ``padded`` says whether that prompt has left padding; without it the
    decoding kernels get no key mask (their unmasked path, which tests visibility only where a key tile
    holds the rows' own positions or a window's edge).
    """

    cached = True

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        prompt_len: int,
        request: StatsRequest | None = None,
        layers: int | Sequence[int] | None = None,
        logits: bool = True,
        hidden_layers: int | Sequence[int] | None = None,
        cache: Cache | None = None,
        capacity: int = 64,
        backend: str = "auto",
    ) -> None:
        register_flashstats()
        check_causal_lm(model, "CachedRecorder")
        # a Transformers model's config (nn.Module.__getattr__ is typed Tensor | Module)
        self.config = cast("PretrainedConfig", model.config)
        if getattr(self.config, "_attn_implementation", None) != ATTN_IMPLEMENTATION or model.training:
            raise ValueError(f"model must be in eval mode with attn_implementation={ATTN_IMPLEMENTATION!r}")
        if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 1:
            raise ValueError(
                f"prompt_len must be an int >= 1 (at least one prompt token), got {prompt_len!r}"
            )
        request = DEFAULT_REQUEST if request is None else request
        if not isinstance(request, StatsRequest):
            raise TypeError(f"request must be a StatsRequest or None, got {type(request).__name__}")
        self.model, self.prompt_len, self.request, self.backend = model, prompt_len, request, backend
        self.body, decoder_layers = _decoder(model)
        self.layers = _layer_indices(layers, len(decoder_layers), "layers")
        self.logits = bool(logits)
        n = len(decoder_layers)
        self.hidden_layers = (
            () if hidden_layers is None else _layer_indices(hidden_layers, n + 1, "hidden_layers")
        )
        self.cache, self.capacity = cache, max(1, int(capacity))
        self.seen = 0  # host mirror of the tokens in the cache
        self.reached: set[int] = set()  # layers whose attention ran in the current model call
        self.length: torch.Tensor | None = None  # [] int64 on the device: tokens in the cache
        self.buf: _Buffers | None = None
        self._sinks: torch.Tensor | None = None  # [B, S] padded positions
        self._pending: torch.Tensor | None = None  # [B, V] logits of the last row of the previous call
        self._call: _Call | None = None
        self.padded = False  # whether the current prompt has padding (answer keys are always real)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._token: Token[Any] | None = None

    # ---------------------------------------------------------------------------------------------
    # context and hooks

    def __enter__(self) -> CachedRecorder:
        if _ACTIVE.get() is not None:
            raise RuntimeError("flashstats: recorders cannot be nested")
        self._token = activate(self)
        self._handles = [
            self.model.register_forward_pre_hook(self._before, with_kwargs=True),
            self.model.register_forward_hook(self._after, with_kwargs=True),
        ]
        self._handles += self._hidden_hooks()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            deactivate(self._token)
            self._token = None
        for h in self._handles:
            h.remove()
        self._handles = []

    def wants(self, layer_idx: object) -> bool:
        """Whether the layer with this index is scored."""
        return isinstance(layer_idx, int) and layer_idx in self.layers

    def matches(self, query: torch.Tensor, key: torch.Tensor) -> bool:
        """Unscored layers build their own masks (the full-forward mask cache does not apply)."""
        return False

    def _before(self, module, args, kwargs) -> None:
        """Pre-hook of the model: the call's tokens, cache and padding; the device bookkeeping."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
            raise ValueError(
                "CachedRecorder needs input_ids [B, q] in every call (inputs_embeds are not supported)"
            )
        cache = kwargs.get("past_key_values")
        if cache is None:
            raise ValueError(
                "CachedRecorder needs a cache in every call: pass past_key_values (or use_cache=True)"
            )
        if torch.is_grad_enabled():
            raise RuntimeError("CachedRecorder records inference only: run the model under torch.no_grad()")
        b, q = ids.shape
        self.reached.clear()
        if self.seen == 0 and q < self.prompt_len:
            raise ValueError(f"the first call must hold the whole prompt ({self.prompt_len} tokens), got {q}")
        if self.seen == 0:
            self._start(ids, kwargs.get("attention_mask"))
        self.cache = cache
        total = self.seen + q
        self._ensure(total, max(total, cache.get_max_length()))
        n_p = min(max(self.prompt_len - self.seen, 0), q)  # prompt rows of this call
        dev = ids.device
        plain = n_p > 0 and self.seen == 0 and not self.padded  # prefill only (of the whole prompt)
        length = self._length
        self._call = _Call(
            ids=ids, q=q, n_p=n_p, total=total, plain_prompt=plain, kv_len=(length + q).reshape(1),
            slots=length + (n_p - self.prompt_len) + torch.arange(q - n_p, device=dev),
        )  # fmt: skip

    def _after(self, module, args, kwargs, output) -> None:
        """Post-hook of the model: logit statistics of the call's answer tokens, then the token count."""
        check_reached(self.layers, self.reached, self.model)
        c = self._now
        if self.logits:
            self._logit_stats(output.logits, c)
        self._length.add_(c.q)
        self.seen = c.total

    def _start(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        """First call of a prompt: device counters, padding mask of the prompt, sink positions.

        After [`restart`][flashstats_hf.CachedRecorder.restart] the same device tensors are overwritten
        in place (a captured step reads them by address) and the buffers are cleared.
        """
        b, dev = ids.shape[0], ids.device
        keep = _prompt_keep(attention_mask, b, self.prompt_len).to(dev)
        sinks = self.request.sink_positions
        if isinstance(sinks, torch.Tensor):
            new_sinks = sinks.to(device=dev, dtype=torch.int64).reshape(b, -1)
        else:
            n_pad = self.prompt_len - keep.sum(1, keepdim=True)
            new_sinks = n_pad + torch.tensor(list(sinks), dtype=torch.int64, device=dev)[None]
        self._keep0 = keep
        # one host read per prompt: without padding every key is real, and the decoding kernels take
        # their unmasked path (the key mask would make every key tile test visibility and count keys)
        self.padded = not bool(keep.all())
        if self.length is None or self._sinks is None or self.buf is None:
            self.length = torch.zeros((), dtype=torch.int64, device=dev)
            self._sinks = new_sinks
            return
        if tuple(new_sinks.shape) != tuple(self._sinks.shape):
            raise ValueError(
                f"a restarted prompt must keep the batch and sink count {tuple(self._sinks.shape)}, "
                f"got {tuple(new_sinks.shape)}"
            )
        self.length.zero_()
        self._sinks.copy_(new_sinks)
        self._clear(keep)

    def _clear(self, keep: torch.Tensor) -> None:
        """Zero every buffer in place and write the new prompt's padding into the key mask."""
        bf = self._bufs
        for x in (bf.rows, bf.diag_prev, bf.sinks, bf.logits, bf.hidden):
            x.zero_()
        for c in bf.columns:
            c.sum.zero_()
            c.count.zero_()
        bf.key_mask.fill_(True)
        bf.key_mask[:, : self.prompt_len] = keep

    def restart(self) -> None:
        """Start over with a new prompt of the same padded length ``P`` and batch, keeping every buffer.

        The next call must hold the new prompt (on a reset cache: ``cache.reset()``). The device
        tensors keep their addresses, so a [`flashstats_hf.GraphedDecodeStep`][] captured for an earlier
        answer replays for the new one (after its own ``restart``); the statistics of the earlier answer
        are gone (read [`stats`][flashstats_hf.CachedRecorder.stats] first).
        """
        self.seen = 0
        self._call = None

    # typed views of the state that the first call creates

    @property
    def _bufs(self) -> _Buffers:
        if self.buf is None:
            raise RuntimeError("CachedRecorder: no call was recorded yet")
        return self.buf

    @property
    def _length(self) -> torch.Tensor:
        if self.length is None:
            raise RuntimeError("CachedRecorder: no call was recorded yet")
        return self.length

    @property
    def _now(self) -> _Call:
        if self._call is None:
            raise RuntimeError("CachedRecorder: layers ran outside a model call of the recorder")
        return self._call

    def _ensure(self, answer_end: int, keys: int) -> None:
        """Allocates or grows the buffers to hold ``answer_end - P`` answer slots and ``keys`` key slots."""
        a_need = max(answer_end - self.prompt_len, 1)
        a = self.capacity
        while a < a_need:
            a *= 2
        self.capacity = a
        if self.buf is None:
            self.buf = self._allocate(a, keys)
            return
        bf = self.buf
        if bf.rows.shape[-1] < a:
            bf.rows, bf.diag_prev = _grow(bf.rows, -1, a), _grow(bf.diag_prev, -1, a)
            bf.sinks, bf.logits, bf.hidden = (
                _grow(bf.sinks, 3, a),
                _grow(bf.logits, 1, a),
                _grow(bf.hidden, 2, a),
            )
        if bf.key_mask.shape[1] < keys:
            grow_to = max(keys, 2 * bf.key_mask.shape[1])
            bf.key_mask = _grow(bf.key_mask, 1, grow_to, True)
            bf.columns = [
                ColumnState(_grow(c.sum, 2, grow_to), _grow(c.count, 1, grow_to)) for c in bf.columns
            ]

    def _allocate(self, a: int, keys: int) -> _Buffers:
        cfg = self.config.get_text_config()
        b, dev = self._keep0.shape[0], self._keep0.device
        assert self._sinks is not None  # made by _start before the buffers
        hq, nl, s = cfg.num_attention_heads, len(self.layers), self._sinks.shape[1]

        def z(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.float32, device=dev)

        key_mask = torch.ones(b, max(keys, self.prompt_len), dtype=torch.bool, device=dev)
        key_mask[:, : self.prompt_len] = self._keep0
        return _Buffers(
            rows=z(5, b, nl, hq, a), diag_prev=z(2, b, nl, hq, a), sinks=z(b, nl, hq, a, s),
            logits=z(b, a, len(LOGIT_STAT_NAMES)), hidden=z(b, len(self.hidden_layers), a, cfg.hidden_size),
            columns=[ColumnState.zeros(b, hq, key_mask.shape[1], dev) for _ in self.layers],
            key_mask=key_mask,
        )  # fmt: skip

    # ---------------------------------------------------------------------------------------------
    # scored attention of one layer

    def score_cached(
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
        """Prompt rows on plain attention, answer rows on ``decode_attention``: ``[B, Hq, q, D]``.

        Cache slot ``j`` of this layer holds position ``offset + j``: 0 for full caches (static ones
        have ``L_k`` slots, of which the first ``total`` are written), ``total - L_k`` for caches that
        keep only a recent window.
        """
        c, bf = self._now, self._bufs
        q, n_p, total, lk = c.q, c.n_p, c.total, key.shape[2]
        layer = self.cache.layers[layer_idx] if self.cache is not None else None
        static_full = lk >= total and not getattr(layer, "is_sliding", False)
        offset = 0 if lk >= total else total - lk
        keep = bf.key_mask[:, offset : offset + lk]
        parts = []
        if n_p:  # prompt rows see keys up to their own: slice them (a static cache has unwritten slots)
            q0 = total - offset - q
            n_k = q0 + n_p
            mask = None  # a prompt from the start, no padding, no window: SDPA's fused causal kernel
            if not (c.plain_prompt and q0 == 0 and window is None):
                mask = visibility(torch.arange(q0, n_k, device=query.device), n_k, keep[:, :n_k], window)
            parts.append(plain_attention(query[:, :, :n_p], key[:, :, :n_k], value[:, :, :n_k], mask,
                                         scale=scale, softcap=softcap))  # fmt: skip
        if n_p < q:
            parts.append(self._score_rows(layer_idx, query[:, :, n_p:], key, value, keep, offset, static_full,
                                          scale=scale, softcap=softcap, window=window))  # fmt: skip
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def _score_rows(self, layer_idx, query, key, value, keep, offset, static_full, **opts) -> torch.Tensor:
        """The answer rows of one layer: one kernel call that writes the statistics into their slots."""
        c, bf = self._now, self._bufs
        li = self.layers.index(layer_idx)
        lk = key.shape[2]
        col = bf.columns[li]
        state = ColumnState(col.sum[..., offset : offset + lk], col.count[:, offset : offset + lk])
        request = self._request_at(offset)
        # valid keys as a device tensor: a host int would be copied to the device in every layer
        kv_len = c.kv_len if static_full or offset == 0 else torch.full_like(c.kv_len, c.total - offset)
        lookups = request.lookups
        targets = RowTargets(
            start=c.slots[:1], rows=bf.rows[:, :, li] if request.rows else None,
            diag_log=bf.diag_prev[0, :, li] if lookups else None,
            prev_weight=bf.diag_prev[1, :, li] if lookups else None,
            sink_weights=bf.sinks[:, li] if lookups else None,
        )  # fmt: skip
        res = decode_attention(
            query, key, value, kv_len=kv_len, request=request,
            column_state=state if request.columns else None, key_mask=keep if self.padded else None,
            prompt_len=max(self.prompt_len - offset, 0), backend=self.backend, targets=targets, **opts,
        )  # fmt: skip
        return res.out  # T1 and T2 are in their answer slots already (no copy per layer)

    def _request_at(self, offset: int) -> StatsRequest:
        """The request with sink positions in cache slots of a layer whose slot 0 is ``offset``.

        Made once per call and offset (not per layer): every full-attention layer shares it.
        """
        made = self._now.requests
        if offset not in made:
            assert self._sinks is not None  # set by the first call
            made[offset] = dataclasses.replace(self.request, sink_positions=self._sinks - offset)
        return made[offset]

    # ---------------------------------------------------------------------------------------------
    # logits and hidden states

    def _logit_stats(self, logits: torch.Tensor, c: _Call) -> None:
        """Statistics of the answer tokens of this call from the logits predicting them.

        ``logits`` holds the last ``K`` rows of the call (``logits_to_keep``); answer token ``t`` of the
        call is predicted by row ``t - 1`` (by the previous call's last row for ``t = 0``).
        """
        q, n_p, k = c.q, c.n_p, logits.shape[1]
        if n_p < q:
            first = max(n_p - 1, 0)  # first row of this call that predicts an answer token
            if first < q - 1 and first < q - k:
                raise ValueError(
                    f"CachedRecorder(logits=True) needs the logits of rows {first}..{q - 2} of this call "
                    f"({q} tokens, the last {k} logit rows given): pass logits_to_keep={q - first} or 0"
                )
            rows = logits[:, first - (q - k) : k - 1]
            if n_p == 0:
                assert self._pending is not None  # the prompt call kept its last row
                rows = torch.cat([self._pending[:, None].to(rows.dtype), rows], 1)
            targets = c.ids[:, n_p:]
            stats = logit_statistics(rows.reshape(-1, rows.shape[-1]), targets.reshape(-1).long())
            self._bufs.logits.index_copy_(1, c.slots, stats.view(*targets.shape, -1))
        last = logits[:, -1].float()
        if self._pending is None or self._pending.shape != last.shape:
            self._pending = last.clone()
        else:
            self._pending.copy_(last)

    def _hidden_hooks(self) -> list:
        """Hooks that write the hidden states of answer rows into their slots."""
        _, layers = _decoder(self.model)
        handles = []
        for k, index in enumerate(self.hidden_layers):

            def keep(hidden: torch.Tensor, k=k) -> None:
                c = self._now
                if c.n_p < c.q:
                    self._bufs.hidden[:, k].index_copy_(1, c.slots, hidden[:, c.n_p :].float())

            if index == 0:
                hook = lambda m, args, kwargs, keep=keep: keep(args[0] if args else kwargs["hidden_states"])  # noqa: E731
                handles.append(layers[0].register_forward_pre_hook(hook, with_kwargs=True))
            elif index == len(layers):
                hook = lambda m, args, out, keep=keep: keep(out[0])  # noqa: E731
                handles.append(self.body.register_forward_hook(hook))
            else:
                hook = lambda m, args, out, keep=keep: keep(out[0] if isinstance(out, tuple) else out)  # noqa: E731
                handles.append(layers[index - 1].register_forward_hook(hook))
        return handles

    # ---------------------------------------------------------------------------------------------
    # public calls

    @torch.no_grad()
    def feed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Runs the model on the next tokens with the cache (the prompt first, then answer chunks).

        Args:
            input_ids: [B, q] int64. The next ``q`` tokens of every example (the first call: the whole
                left-padded prompt, possibly followed by the start of the answer).
            attention_mask: [B, q] bool/int or None, first call only: 0 on left padding.

        Returns:
            ``[B, V]`` logits of the last row (the next-token distribution after these tokens).
        """
        if _ACTIVE.get() is not self:
            raise RuntimeError("CachedRecorder.feed must run inside `with recorder:`")
        if self.cache is None:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.config)
        dev = next(self.model.parameters()).device
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.is_floating_point():
            raise ValueError(f"input_ids must be a [B, q] integer tensor, got {input_ids!r:.80}")
        ids = input_ids.to(dev)
        if self.seen and attention_mask is not None:
            raise ValueError("attention_mask is taken on the first call only (later tokens are all real)")
        b, q = ids.shape
        if self.seen and b != self._bufs.key_mask.shape[0]:
            raise ValueError(
                f"feed got {b} example(s) but the prompt in the cache has {self._bufs.key_mask.shape[0]}: "
                "feed the next tokens of every example together (or restart() with a new prompt)"
            )
        check_token_ids(ids, self.model)
        keep = torch.ones(b, self.seen + q, dtype=torch.bool, device=dev)
        if self.seen:
            keep[:, : self.prompt_len] = self._bufs.key_mask[:, : self.prompt_len]
        elif attention_mask is not None:
            keep = key_mask_of(attention_mask, (b, q), dev)
        position_ids = (keep.long().cumsum(1) - 1).clamp(min=0)[:, self.seen :]
        n_p = min(max(self.prompt_len - self.seen, 0), q)
        rows = 1 if n_p == q else q - max(n_p - 1, 0)  # the logit rows that predict answer tokens
        out = self.model(
            input_ids=ids, attention_mask=keep.long(), position_ids=position_ids, past_key_values=self.cache,
            use_cache=True, logits_to_keep=rows,
        )  # fmt: skip
        return out.logits[:, -1]

    def buffer_bytes(self) -> int:
        """Bytes the recorder holds on the device (0 before the first call).

        Its per-answer-token output slots (rows, lookups, logit statistics, hidden states; the answer
        capacity, doubled as it fills) and its per-key state (each scored layer's column sums and counts,
        and the key mask). With the KV cache, that is the memory following an answer needs.
        """
        bf = self.buf
        if bf is None:
            return 0
        tensors = [bf.rows, bf.diag_prev, bf.sinks, bf.logits, bf.hidden, bf.key_mask]
        tensors += [t for c in bf.columns for t in (c.sum, c.count)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def stats(self) -> ForwardStats:
        """Statistics of the answer tokens so far, as [`flashstats_hf.record_forward`][] returns them.

        Returns:
            ForwardStats: copies (later calls do not change them); rows / lookups ``[B, NL, Hq, A]``,
            columns ``[B, NL, Hq, L]`` (``L`` tokens so far), logit statistics ``[B, A, V]``, hidden
            states ``[B, NH, A, Dm]``, with ``A`` the answer tokens so far.
        """
        if self.buf is None:
            raise ValueError("CachedRecorder.stats: no call was recorded yet")
        a, total, bf = max(self.seen - self.prompt_len, 0), self.seen, self.buf
        dev = bf.key_mask.device
        b = bf.key_mask.shape[0]
        req = self.request
        rows = RowStats(*(bf.rows[i, ..., :a].clone() for i in range(5))) if req.rows else None
        lookups = None
        if req.lookups:
            lookups = LookupStats(bf.diag_prev[0, ..., :a].clone(), bf.diag_prev[1, ..., :a].clone(),
                                  bf.sinks[..., :a, :].clone())  # fmt: skip
        columns = None
        if req.columns:
            per = [ColumnState(c.sum[..., :total], c.count[:, :total]).stats() for c in bf.columns]
            columns = type(per[0])(
                torch.stack([p.sum for p in per], 1), torch.stack([p.mean for p in per], 1)
            )
        keep = bf.key_mask[:, :total].clone()
        return ForwardStats(
            layers=self.layers, answer_mask=torch.ones(b, a, dtype=torch.bool, device=dev),
            answer_len=torch.full((b,), a, device=dev), prompt_len=keep[:, : self.prompt_len].sum(1),
            key_mask=keep, rows=rows, lookups=lookups, columns=columns,
            logit_stats=bf.logits[:, :a].clone() if self.logits else None,
            logit_stat_names=LOGIT_STAT_NAMES if self.logits else (), hidden_layers=self.hidden_layers,
            hidden=bf.hidden[:, :, :a].clone() if self.hidden_layers else None,
            response_start=torch.full((b,), self.prompt_len, device=dev),
        )  # fmt: skip


__all__ = ["CachedRecorder"]
