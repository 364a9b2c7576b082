"""The ``"attnstats"`` attention implementation and its mask function for Transformers.

Transformers looks attention functions up by name in ``AttentionInterface`` and builds each
layer's mask with the function of the same name in ``AttentionMaskInterface``. Our mask function
hands padding over as a ``[B, L]`` keep mask (plain causal or sliding-window causal patterns) and
falls back to a dense 4-D boolean mask for any other pattern (bidirectional, chunked, packed or
user-extended masks, cached decoding); layers that receive a dense mask are never scored.

Outside [`flashstats_hf.record_forward`][] the attention is plain causal attention: PyTorch SDPA,
or, for soft-capped and sliding-window layers, the flashstats Base kernel (Triton on CUDA, chunked
PyTorch on CPU; no score matrix or dense mask is ever built). Inside it, the scored layers split their
rows: prompt rows on that same plain path, response rows on
[`flashstats_kernels.response_attention`][].
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from flashstats_kernels import MAX_HEAD_DIM
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

from flashstats_hf._recorder import active_recorder
from flashstats_hf._sdpa import base_attention, kernel_can_run, plain_attention, visibility

ATTN_IMPLEMENTATION = "attnstats"
"""Name under which the attention function and its mask function are registered.

Not ``"flashstats"``: Transformers treats every implementation name that contains ``"flash"`` as a
FlashAttention variant (``is_flash_attention_requested``) and tries to load it as a hub kernel."""


class AttentionWeightsUnavailableError(ValueError):
    """A forward under ``"attnstats"`` asked for attention weights (``output_attentions=True``).

    The ``"attnstats"`` attention never materialises the attention matrix, so it has no weights to
    return. Statistics of the answer rows come from [`flashstats_hf.record_forward`][]; the dense
    weights of chosen heads from ``record_forward(..., dense_heads={layer: heads})``; every weight of
    every head from a model loaded with ``attn_implementation="eager"``.
    """


def _no_weights_message(module: torch.nn.Module) -> str:
    return (
        f"flashstats: layer {getattr(module, 'layer_idx', '?')} was called with output_attentions=True, "
        f'but the "{ATTN_IMPLEMENTATION}" attention never builds the attention matrix and has no weights to '
        "return. Use flashstats_hf.record_forward(model, input_ids, response_start=...) for the "
        "statistics, record_forward(..., dense_heads={layer: [heads]}) for the weights of chosen heads, "
        'or load the model with attn_implementation="eager" for every weight'
    )


def register_flashstats() -> str:
    """Register the ``"attnstats"`` attention and mask functions with Transformers (idempotent).

    Importing ``flashstats_hf`` already calls this; afterwards
    ``AutoModelForCausalLM.from_pretrained(..., attn_implementation="attnstats")`` and
    ``model.set_attn_implementation("attnstats")`` work.

    Returns:
        The registered implementation name, ``"attnstats"``.
    """
    AttentionInterface.register(ATTN_IMPLEMENTATION, flashstats_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, flashstats_mask)
    return ATTN_IMPLEMENTATION


def flashstats_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable = causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | None:
    """Mask function registered as ``"attnstats"`` in ``AttentionMaskInterface``.

    Args:
        batch_size: batch size ``B``.
        q_length: number of query positions.
        kv_length: number of key positions ``L``.
        q_offset: position of the first query (non-zero only with a cache).
        kv_offset: position of the first key (non-zero only with a cache).
        mask_function: Transformers' mask pattern (causal, sliding, or a composition).
        attention_mask: [B, >=L] bool or None. True on real tokens.
        **kwargs: the other arguments Transformers passes (``local_size`` for sliding layers,
            ``allow_is_causal_skip``, ``use_vmap``, ``device``, ...).

    Returns:
        ``[B, L]`` bool keep mask (True on real keys) or None for plain causal or sliding-window
        causal patterns; otherwise the dense ``[B, 1, q_length, L]`` bool mask of ``sdpa_mask``.
    """
    plain_causal = mask_function is causal_mask_function
    plain_sliding = (
        kwargs.get("local_size") is not None
        and kwargs.get("allow_is_causal_skip", True)
        and not _is_chunked(kwargs.get("local_size"), kwargs.get("config"))
    )
    no_offsets = not isinstance(q_offset, torch.Tensor) and q_offset == 0 and kv_offset == 0
    if (plain_causal or plain_sliding) and not kwargs.get("use_vmap", False) and no_offsets:
        if attention_mask is None:
            return None
        return attention_mask[:, -kv_length:].to(torch.bool)
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        **kwargs,
    )


def _is_chunked(local_size: object, config: object) -> bool:
    """Whether a mask with this ``local_size`` is Llama 4's chunked pattern rather than a sliding window.

    Transformers passes ``local_size`` and ``allow_is_causal_skip`` with both; its chunk size is
    ``config.attention_chunk_size``. Chunked layers must get the dense mask: the keep mask would make them
    plain causal (their attention modules pass no window). Read from the config, not from the mask
    function's closure, so that ``torch.compile`` traces it.
    """
    chunk = getattr(config, "attention_chunk_size", None)
    return chunk is not None and chunk == local_size


def _layer_type(module: torch.nn.Module) -> str | None:
    """The layer's entry in its config's ``layer_types`` (``"sliding_attention"``, ...), or None."""
    layer_types = getattr(getattr(module, "config", None), "layer_types", None)
    layer_idx = getattr(module, "layer_idx", None)
    if layer_types is not None and isinstance(layer_idx, int) and layer_idx < len(layer_types):
        return layer_types[layer_idx]
    return None


def _layer_window(module: torch.nn.Module, sliding_window: int | None) -> tuple[int | None, bool]:
    """The sliding window of a layer and whether we are sure of it.

    The ``sliding_window`` argument wins; without one, the module's ``sliding_window`` attribute, except on
    layers that the config's ``layer_types`` marks as full attention (EXAONE 4 keeps the attribute on
    every layer and passes ``sliding_window=None`` on its full ones).
    """
    layer_type = _layer_type(module)
    window = sliding_window
    if window is None and layer_type != "full_attention":
        window = getattr(module, "sliding_window", None)
    if window is None and layer_type is not None:
        # A sliding layer whose module did not tell us its window: do not guess.
        return None, layer_type != "sliding_attention"
    return window, True


def flashstats_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention function registered as ``"attnstats"`` in ``AttentionInterface``.

    Args:
        module: the calling attention module (``layer_idx`` selects scored layers).
        query: [B, Hq, Lq, D]. Queries (rotary embeddings applied).
        key: [B, Hkv, L, D]. Keys.
        value: [B, Hkv, L, D]. Values.
        attention_mask: what [`flashstats_mask`][flashstats_hf.flashstats_mask] returned: [B, L] bool keep
            mask, None, or a dense [B, 1, Lq, L] mask for patterns we do not score.
        dropout: attention dropout probability.
        scaling: score scale (default ``D ** -0.5``).
        sliding_window: the layer's sliding window, or None.
        softcap: the layer's score soft-capping constant, or None.
        is_causal: overrides ``module.is_causal``.
        **kwargs: other arguments from the model (``position_bias`` is delegated to SDPA).

    Returns:
        tuple[torch.Tensor, None]: the ``[B, Lq, Hq, D]`` attention output, and None: no attention weights
        are returned.

    Raises:
        AttentionWeightsUnavailableError: the model was called with ``output_attentions=True`` (there
            are no weights to return; the error names what to use instead).
    """
    if kwargs.get("output_attentions"):
        raise AttentionWeightsUnavailableError(_no_weights_message(module))
    if kwargs.get("s_aux") is not None:
        raise ValueError(
            f"flashstats: layer {getattr(module, 'layer_idx', '?')} ({type(module).__name__}) has attention "
            "sinks (`s_aux`, as in GPT-OSS), which the attnstats attention does not support: its weights "
            "and statistics would leave the sink out; expected a model without attention sinks"
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window, window_known = _layer_window(module, sliding_window)
    dv = value.shape[-1]
    if dv != key.shape[-1] and (active_recorder() is not None or softcap is not None or window is not None):
        # Multi-head latent attention (DeepSeek-V2/V3, MiniCPM3): value heads narrower (or wider) than
        # query/key heads. The kernels take one head dim: zero columns change no score and no weight,
        # and the output's extra columns are cut off.
        d = max(dv, key.shape[-1])
        query, key, value = (F.pad(x, (0, d - x.shape[-1])) for x in (query, key, value))
        out, _ = flashstats_attention_forward(
            module, query, key, value, attention_mask, dropout, scale, sliding_window, softcap, is_causal,
            **kwargs,
        )  # fmt: skip
        return out[..., :dv].contiguous(), None
    if not window_known:
        raise ValueError(
            f"flashstats: layer {getattr(module, 'layer_idx', '?')} is a sliding-window layer but its "
            "attention module passes no `sliding_window`; expected the window as an argument or attribute"
        )
    recorder: Any = active_recorder()  # a Recorder or a CachedRecorder (which has score_cached)
    layer_idx = getattr(module, "layer_idx", None)
    structured = attention_mask is None or attention_mask.ndim == 2
    exotic = kwargs.get("position_bias") is not None or not causal or not structured
    cached = getattr(recorder, "cached", False)  # a CachedRecorder (generation, streamed chunks)
    if recorder is not None and isinstance(layer_idx, int):
        recorder.reached.add(layer_idx)  # checked after the model call (`_recorder.check_reached`)
        if query.shape[-1] > MAX_HEAD_DIM and recorder.wants(layer_idx):
            raise ValueError(
                f"flashstats: layer {layer_idx} ({type(module).__name__}) has head dim {query.shape[-1]}; "
                f"the statistics kernels take head dims up to {MAX_HEAD_DIM}, so this model's "
                "layers cannot be scored (expected a proxy with head dim <= 256)"
            )
    if cached and recorder.wants(layer_idx):
        if (
            kwargs.get("position_bias") is not None
            or not causal
            or _layer_type(module) == "chunked_attention"
        ):
            raise ValueError(
                f"flashstats: layer {layer_idx} is non-causal, chunked or has a position bias; "
                "CachedRecorder scores causal (or sliding-window) self-attention only (leave the layer "
                "out with layers=...)"
            )
        out = recorder.score_cached(layer_idx, query, key, value, scale=scale, softcap=softcap, window=window)
        return out.transpose(1, 2).contiguous(), None
    # documents packed on one axis
    if recorder is not None and not cached and recorder.plan.packing is not None:
        reason = recorder.cannot_score(query, key, exotic)
        if reason is not None:
            raise ValueError(
                f"flashstats: layer {layer_idx} cannot run on a packed batch ({reason}); call "
                "record_forward(..., pack=False)"
            )
        options = {"scale": scale, "softcap": softcap, "window": window}
        if recorder.wants(layer_idx):
            out = recorder.score_layer(layer_idx, query, key, value, **options)
        else:
            out = recorder.plain_packed(query, key, value, **options)
        return out.transpose(1, 2).contiguous(), None
    if recorder is not None and isinstance(layer_idx, int) and recorder.wants(layer_idx):
        reason = recorder.cannot_score(query, key, exotic)
        if reason is None:
            out = recorder.score_layer(
                layer_idx, query, key, value, scale=scale, softcap=softcap, window=window
            )
            return out.transpose(1, 2).contiguous(), None
        warnings.warn(f"flashstats: layer {layer_idx} runs unscored: {reason}", stacklevel=2)
    if exotic:
        out = _exotic_attention(
            module, query, key, value, attention_mask, dropout, scale, softcap, causal, window, kwargs
        )
        return out, None
    if kernel_can_run(query, key, softcap, window, dropout):
        backend = "auto" if recorder is None else recorder.plan.backend
        out = base_attention(
            query, key, value, attention_mask, scale=scale, softcap=softcap, window=window, backend=backend
        )
        return out.transpose(1, 2).contiguous(), None
    mask = _full_mask(query, key, attention_mask, window, recorder)
    out = plain_attention(query, key, value, mask, scale=scale, softcap=softcap, dropout=dropout)
    return out.transpose(1, 2).contiguous(), None


def _exotic_attention(
    module, query, key, value, mask, dropout, scale, softcap, causal, window, kwargs
) -> torch.Tensor:
    """Unscored attention for dense masks, non-causal layers or position biases: ``[B, Lq, Hq, D]``."""
    lq, lk = query.shape[2], key.shape[2]
    if mask is None or mask.ndim == 2:  # keep mask (or none): spell out causality, window and padding
        if causal:
            mask = visibility(torch.arange(lk - lq, lk, device=query.device), lk, mask, window)
        elif mask is not None:
            mask = mask[:, None, None, :]
    if softcap is None:
        kwargs.pop("output_attentions", None)
        return sdpa_attention_forward(
            module, query, key, value, mask, dropout, scaling=scale, is_causal=False, **kwargs
        )[0]
    if kwargs.get("position_bias") is not None:
        raise ValueError("flashstats: soft-capped attention with a position bias is not supported")
    if mask is None:
        mask = torch.ones(1, 1, lq, lk, dtype=torch.bool, device=query.device)
    elif mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    out = plain_attention(query, key, value, mask, scale=scale, softcap=softcap, dropout=dropout)
    return out.transpose(1, 2).contiguous()


def _full_mask(query, key, keep, window, recorder) -> torch.Tensor | None:
    """Mask of an unscored layer over all rows (cached per forward by the recorder)."""
    if recorder is not None and recorder.matches(query, key):
        return recorder.full_mask(window)
    lq, lk = query.shape[2], key.shape[2]
    if keep is None and window is None and lq == lk:
        return None
    return visibility(torch.arange(lk - lq, lk, device=query.device), lk, keep, window)
