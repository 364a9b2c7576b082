"""The inputs of a recorded forward, checked: token ids, answer starts, padding mask, layer indices.

`record_forward`, the cached and the graphed recorders share these checks, so each names what it expected
in the same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class _Batch:
    """Validated inputs and the per-forward index tensors (all on the device of ``input_ids``)."""

    key_mask: torch.Tensor  # [B, L] bool
    padded: bool  # whether any key is padding
    response_start: torch.Tensor  # [B] int64
    answer_len: torch.Tensor  # [B] int64
    prompt_len: torch.Tensor  # [B] int64, real tokens before the answer
    rows: int  # R = max answer length
    answer_mask: torch.Tensor  # [B, A] bool
    answer_pos: torch.Tensor  # [B, A] int64 padded position of answer token a (clamped)
    row_index: torch.Tensor  # [B, A] int64 response row of answer token a (clamped)


def check_causal_lm(model: object, who: str) -> None:
    """A named `TypeError` unless ``model`` is a Transformers model (a module with a ``PretrainedConfig``)."""
    from transformers import PretrainedConfig

    if not isinstance(model, torch.nn.Module) or not isinstance(
        getattr(model, "config", None), PretrainedConfig
    ):
        raise TypeError(
            f"{who} expects a Transformers causal LM (flashstats_hf.load_model or "
            f"AutoModelForCausalLM.from_pretrained), got {type(model).__name__}"
        )


def check_token_ids(ids: torch.Tensor, model: torch.nn.Module) -> None:
    """A named `ValueError` unless every id of ``ids`` lies in ``[0, vocabulary size)`` of ``model``."""
    get_embeddings = getattr(model, "get_input_embeddings", None)
    emb = get_embeddings() if callable(get_embeddings) else None
    vocab = getattr(emb, "num_embeddings", None) or getattr(
        getattr(model, "config", None), "vocab_size", None
    )
    if vocab is None or ids.numel() == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(
            f"input_ids must lie in [0, {vocab}) (the model's vocabulary size), got ids from {lo} to {hi}"
        )


def key_mask_of(attention_mask: object, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``[B, L] bool`` from a 0/1 bool or integer mask of ``shape``: left-padded, ending on a real token.

    Raises:
        ValueError: another shape or dtype, values other than 0 and 1, or not left padding.
    """
    if attention_mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if (
        not isinstance(attention_mask, torch.Tensor)
        or tuple(attention_mask.shape) != tuple(shape)
        or attention_mask.is_floating_point()
        or attention_mask.is_complex()
    ):
        raise ValueError(
            f"attention_mask must be None or a [B, L] = {tuple(shape)} bool or integer tensor of 0/1, got "
            f"{_describe(attention_mask)}"
        )
    if attention_mask.dtype != torch.bool and bool(((attention_mask != 0) & (attention_mask != 1)).any()):
        raise ValueError(
            f"attention_mask must hold only 0 (padding) and 1 (real tokens), got values "
            f"{sorted(set(attention_mask.unique().tolist()))[:6]}"
        )
    key_mask = attention_mask.to(device=device, dtype=torch.bool)
    if not bool((key_mask[:, 1:] >= key_mask[:, :-1]).all() and key_mask[:, -1].all()):
        raise ValueError(
            "attention_mask must be left-padded: zeros (padding) then ones, ending on a real token"
        )
    return key_mask


def _as_batch(input_ids: object, response_start: object, attention_mask: object) -> _Batch:
    """Validates the inputs (left padding, at least one prompt and one answer token) and indexes them."""
    if (
        not isinstance(input_ids, torch.Tensor)
        or input_ids.ndim != 2
        or input_ids.dtype
        not in (
            torch.int64,
            torch.int32,
        )
    ):
        raise TypeError(f"input_ids must be a [B, L] int64 tensor, got {_describe(input_ids)}")
    batch, length = input_ids.shape
    if batch == 0 or length == 0:
        raise ValueError(
            f"input_ids must hold at least one example and one token, got shape {tuple(input_ids.shape)}"
        )
    device = input_ids.device
    key_mask = key_mask_of(attention_mask, (batch, length), device)
    start = _response_start(response_start, batch, device)
    n_pad = length - key_mask.sum(dim=1)
    answer_len, prompt_len = length - start, start - n_pad
    if bool((answer_len < 1).any() or (prompt_len < 1).any()):
        raise ValueError(
            f"response_start must lie in [first real token + 1, L - 1] = [{(n_pad + 1).tolist()}, "
            f"{length - 1}] (at least one prompt and one answer token), got {start.tolist()}"
        )
    rows = int(answer_len.max())
    a = torch.arange(rows, device=device)
    return _Batch(
        key_mask=key_mask,
        padded=not bool(key_mask.all()),
        response_start=start,
        answer_len=answer_len,
        prompt_len=prompt_len,
        rows=rows,
        answer_mask=a[None, :] < answer_len[:, None],
        answer_pos=(start[:, None] + a[None, :]).clamp(max=length - 1),
        row_index=(rows - answer_len[:, None] + a[None, :]).clamp(max=rows - 1),
    )


def _response_start(value: object, batch: int, device: torch.device) -> torch.Tensor:
    """``[B] int64`` on ``device`` from ``response_start`` (`record_forward`).

    One int for every example (a Python or NumPy integer, or a 0-d integer tensor), or ``B`` of them (a
    sequence, a NumPy array or a ``[B]`` tensor).
    """
    import numbers
    import sys

    np = sys.modules.get("numpy")  # a NumPy value implies NumPy is imported (not a dependency here)
    bools = (bool, np.bool_) if np is not None else (bool,)

    def is_int(v: object) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bools)

    if isinstance(value, bools):
        raise TypeError("response_start must be an int or a [B] integer tensor, got a bool")
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        value = int(value) if value.dtype != torch.bool else value
    if is_int(value):
        return torch.full((batch,), int(value), dtype=torch.int64, device=device)  # type: ignore[call-overload]
    if np is not None and isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.integer):
        value = torch.from_numpy(value.astype(np.int64))
    if isinstance(value, Sequence) and all(is_int(v) for v in value):
        value = torch.tensor([int(v) for v in value], dtype=torch.int64)
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.dtype == torch.bool:
        raise TypeError(f"response_start must be an int or a [B] integer tensor, got {_describe(value)}")
    if value.shape != (batch,):
        raise ValueError(f"response_start must have shape [B] = [{batch}], got {tuple(value.shape)}")
    return value.to(device=device, dtype=torch.int64)


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


def _layer_indices(value: object, count: int, name: str) -> tuple[int, ...]:
    """Sorted, de-duplicated indices in ``[0, count)`` (negative ones count from the end); None: all."""
    if value is None:
        return tuple(range(count))
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, Sequence) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise TypeError(f"{name} must be None, an int or a sequence of ints, got {value!r}")
    bad = [i for i in value if not -count <= i < count]
    if bad:
        raise ValueError(f"{name} must lie in [-{count}, {count}), got {bad}")
    return tuple(sorted({i % count for i in value}))


def _decoder(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.ModuleList]:
    """The model body (without LM head) and its list of decoder layers (``.layers``, or GPT-2's ``.h``)."""
    body = getattr(model, "base_model", model)
    if body is model and isinstance(getattr(model, "model", None), torch.nn.Module):
        # base_model falls back to the model itself when base_model_prefix names no attribute (Llama 4's
        # text-only LM: prefix "language_model", body in `.model`)
        body = model.model
    layers = getattr(body, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        layers = getattr(body, "h", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(
            f"expected a decoder-only Transformers model whose body ({type(body).__name__}) holds its "
            f"decoder layers in `.layers` (or `.h`), got {type(model).__name__}"
        )
    return body, layers
