"""The reader's network: the proxy with low-rank adapters (peft) and a token head on its last hidden state.

The token head is one linear map from the decoder's final normed hidden state at an answer token to
that token's logit of being unsupported: the state at token ``t`` has read the context, the question
and the answer up to and including ``t``. Answer scores pool the token logits (`pool_logits`).

Training runs the proxy with PyTorch's SDPA attention (the statistics kernels take no gradient);
batches are right-padded, so under the causal mask no real token attends to padding and no mask is
needed. A loaded reader merges its adapters into the proxy's weights (`merged_proxy`), so scoring costs
one plain forward of the proxy and the attention statistics can be read from the adapted model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from halluprobe.reader._settings import DEFAULT_TARGETS, POOLS, AdapterSpec

__all__ = [
    "DEFAULT_TARGETS",
    "POOLS",
    "AdapterSpec",
    "ReaderHead",
    "adapter_state",
    "adapter_shapes",
    "inject",
    "merged_proxy",
    "pool_logits",
    "token_logits",
]


class ReaderHead(torch.nn.Module):
    """``[..., Dm] -> [...]``: the logit that a token is unsupported, from the final hidden state."""

    def __init__(self, width: int, bias: float = -2.0) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, 1)
        torch.nn.init.normal_(self.proj.weight, std=0.01)
        torch.nn.init.constant_(self.proj.bias, bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


def _lora_config(spec: AdapterSpec, dropout: float):
    from peft import LoraConfig

    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=dropout,
        target_modules=list(spec.targets),
        bias="none",
    )


def inject(model: torch.nn.Module, spec: AdapterSpec, dropout: float = 0.0):
    """``model`` with fresh adapters (peft; ``B = 0``, so it computes what the proxy computed).

    The proxy's own weights are frozen; only the adapters train. Returns the peft model, which
    shares its modules with ``model``.

    Raises:
        ValueError: ``spec`` is malformed, or none of its targets is a linear layer of ``model``.
    """
    from peft import get_peft_model

    spec.check()
    present = {
        name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)
    }
    missing = [t for t in spec.targets if t not in present]
    if missing:
        raise ValueError(
            f"adapter targets {missing} are not linear layers of the proxy ({type(model).__name__} has "
            f"{sorted(present)})"
        )
    return get_peft_model(model, _lora_config(spec, dropout))


def _short(key: str) -> str:
    """Peft's state-dict key of an adapter matrix -> ``<module path>.lora_A`` / ``.lora_B``."""
    key = key.removeprefix("base_model.model.")
    return (
        key.replace(".lora_A.default.weight", ".lora_A")
        .replace(".lora_A.weight", ".lora_A")
        .replace(".lora_B.default.weight", ".lora_B")
        .replace(".lora_B.weight", ".lora_B")
    )


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    """The adapter matrices, ``<module path>.lora_A: [r, in]`` and ``.lora_B: [out, r]`` (CPU, float32)."""
    from peft import get_peft_model_state_dict

    return {
        _short(k): v.detach().float().cpu().clone() for k, v in get_peft_model_state_dict(peft_model).items()
    }


def adapter_shapes(model: torch.nn.Module, spec: AdapterSpec) -> dict[str, tuple[int, ...]]:
    """What `adapter_state` of ``model`` with ``spec`` holds: name -> shape (no adapter is built)."""
    out: dict[str, tuple[int, ...]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.rsplit(".", 1)[-1] in spec.targets:
            out[f"{name}.lora_A"] = (spec.rank, int(mod.in_features))
            out[f"{name}.lora_B"] = (int(mod.out_features), spec.rank)
    return out


def peft_keys(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`adapter_state`'s names -> the names peft's ``set_peft_model_state_dict`` reads (float32)."""
    out = {}
    for name, value in tensors.items():
        module, kind = name.rsplit(".", 1)
        out[f"base_model.model.{module}.{kind}.weight"] = value.float()
    return out


def merged_proxy(
    model: torch.nn.Module, spec: AdapterSpec, tensors: dict[str, torch.Tensor]
) -> torch.nn.Module:
    """``model`` with the adapters ``tensors`` (`adapter_state`'s names) merged into its weights, in place.

    Raises:
        ValueError: the tensors are not exactly the adapters ``spec`` gives ``model`` (a name missing or
            extra, or a shape that differs), naming the first difference.
    """
    from peft import set_peft_model_state_dict

    want = adapter_shapes(model, spec)
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    for name in sorted(set(want) | set(got)):
        if name not in got:
            raise ValueError(
                f"the adapter has no tensor {name!r}, which rank {spec.rank} on this proxy needs"
            )
        if name not in want:
            raise ValueError(f"the adapter's tensor {name!r} matches no adapted layer of this proxy")
        if want[name] != got[name]:
            raise ValueError(
                f"the adapter's tensor {name!r} has shape {got[name]}; this proxy needs {want[name]}"
            )
    peft_model = inject(model, spec)
    result = set_peft_model_state_dict(peft_model, peft_keys(tensors))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"the adapter's tensors {unexpected[:3]} were not used by the proxy")
    return peft_model.merge_and_unload()


def token_logits(
    model: Any, head: ReaderHead, rows: Sequence[tuple[Any, int]], device: torch.device
) -> list[torch.Tensor]:
    """Each row's answer-token logits from one right-padded forward of ``model``'s decoder.

    Args:
        model: A causal LM (adapted or merged), whose ``get_decoder()`` returns the final normed states.
        head: The token head.
        rows: ``(token ids, index of the first answer token)`` of each example.
        device: Where ``model`` lives.

    Returns:
        ``[A_b] float32`` logits per row (higher = more likely unsupported), on ``device``.
    """
    width = max(len(ids) for ids, _ in rows)
    batch = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (ids, _) in enumerate(rows):
        batch[b, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    batch = batch.to(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    with autocast:
        hidden = model.get_decoder()(input_ids=batch, use_cache=False).last_hidden_state  # [B, L, Dm]
    return [head(hidden[b, start : len(ids)]) for b, (ids, start) in enumerate(rows)]


def pool_logits(z: torch.Tensor, pool: str) -> torch.Tensor:
    """The answer logit of token logits ``z: [A]`` (A >= 1).

    ``"max"``: the largest token logit; ``"mean"``: their mean; ``"noisy-or"``: the logit of
    ``1 - prod(1 - sigmoid(z_t))``, the probability that at least one token is unsupported when tokens
    are independent (``log(expm1(S))`` with ``S = sum softplus(z_t)``).
    """
    if pool == "max":
        return z.max()
    if pool == "mean":
        return z.mean()
    if pool == "noisy-or":
        s = torch.nn.functional.softplus(z).sum().clamp_min(1e-6)
        return s + torch.log(-torch.expm1(-s))
    raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
