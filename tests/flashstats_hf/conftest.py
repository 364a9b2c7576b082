"""Shared helpers: tiny random models and statistics recomputed from eager attention weights."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION
from transformers import (
    AutoModelForCausalLM,
    CohereConfig,
    DeepseekV3Config,
    Exaone4Config,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    GraniteConfig,
    Llama4TextConfig,
    LlamaConfig,
    MistralConfig,
    Qwen3Config,
)

COMMON = dict(
    vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2
)
CONFIGS = {
    "qwen3": lambda: Qwen3Config(**COMMON, num_hidden_layers=3, head_dim=16, initializer_range=0.3),
    "llama": lambda: LlamaConfig(**COMMON, num_hidden_layers=2, initializer_range=0.3),
    "qwen3_sliding": lambda: Qwen3Config(
        **COMMON,
        num_hidden_layers=2,
        head_dim=16,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=1,
        initializer_range=0.3,
    ),
    "gemma2": lambda: Gemma2Config(
        **COMMON,
        num_hidden_layers=2,
        head_dim=16,
        sliding_window=4,
        attn_logit_softcapping=3.0,
        final_logit_softcapping=5.0,
        query_pre_attn_scalar=16,
        initializer_range=0.3,
    ),
    "gemma3": lambda: Gemma3TextConfig(
        **COMMON,
        num_hidden_layers=2,
        head_dim=16,
        sliding_window=3,
        query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"],
        initializer_range=0.3,
    ),
    "mistral": lambda: MistralConfig(**COMMON, num_hidden_layers=2, sliding_window=5, initializer_range=0.3),
    # decoder layers in `.h`, learned absolute positions, multi-head attention
    "gpt2": lambda: GPT2Config(vocab_size=101, n_embd=64, n_layer=2, n_head=4, initializer_range=0.3),
    # every attention module holds `sliding_window`; full layers pass sliding_window=None
    "exaone4": lambda: Exaone4Config(
        **COMMON,
        num_hidden_layers=2,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention"],
        initializer_range=0.3,
    ),
    # the LM head's logits are scaled: times `logit_scale` (Cohere), divided by `logits_scaling` (Granite)
    "cohere": lambda: CohereConfig(**COMMON, num_hidden_layers=2, logit_scale=4.0, initializer_range=0.3),
    "granite": lambda: GraniteConfig(
        **COMMON, num_hidden_layers=2, logits_scaling=0.25, initializer_range=0.3
    ),
    # Llama4ForCausalLM: base_model_prefix names no attribute, the body is `.model`; layer 0 is a
    # chunked-attention layer (chunks of `attention_chunk_size` tokens), layer 1 a full NoPE layer
    "llama4": lambda: Llama4TextConfig(
        **COMMON,
        num_hidden_layers=2,
        head_dim=16,
        num_local_experts=2,
        num_experts_per_tok=1,
        intermediate_size_mlp=96,
        attention_chunk_size=64,
        no_rope_layers=[1, 0],
        initializer_range=0.3,
    ),
    # multi-head latent attention: value heads (12) narrower than query/key heads (8 + 8)
    "deepseek_v3": lambda: DeepseekV3Config(
        **{**COMMON, "num_key_value_heads": 4},
        num_hidden_layers=2,
        first_k_dense_replace=2,
        q_lora_rank=None,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=12,
        initializer_range=0.3,
    ),
}


def tiny_models(kind: str, device: str = "cpu", seed: int = 0):
    """The same random weights under the ``attnstats`` and the eager implementation (separate configs)."""
    torch.manual_seed(seed)
    config = CONFIGS[kind]()
    ours = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=ATTN_IMPLEMENTATION)
    eager = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager")
    eager.load_state_dict(ours.state_dict())
    return ours.to(device).eval(), eager.to(device).eval()


def padded_batch(lengths, answers, vocab=101, seed=1, device="cpu"):
    """Random left-padded batch: example b has ``lengths[b]`` tokens, the last ``answers[b]`` the answer."""
    g = torch.Generator().manual_seed(seed)
    length = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), length), generator=g)
    mask = torch.zeros(len(lengths), length, dtype=torch.int64)
    for b, n in enumerate(lengths):
        mask[b, length - n :] = 1
        ids[b, : length - n] = 0
    start = torch.tensor([length - a for a in answers])
    return ids.to(device), mask.to(device), start.to(device)


def eager_forward(eager, ids, mask):
    """Eager forward with the same position ids as ``record_forward`` (counted from the first real token)."""
    position_ids = (mask.long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        return eager(
            ids,
            attention_mask=mask,
            position_ids=position_ids,
            output_attentions=True,
            output_hidden_states=True,
        )


def eager_statistics(weights, mask, start, sinks=(0,), diag_eps=1e-30, window=None):
    """Every kernel statistic recomputed from one layer's materialised weights, answer-aligned.

    Args:
        weights: [B, H, L, L] eager attention weights of one layer.
        mask: [B, L] keep mask.
        start: [B] padded index of the first answer token.
        sinks: sink offsets from each example's first real token.
        diag_eps: clamp of the log-diagonal.
        window: sliding window of the layer, or None.

    Returns:
        dict of name -> tensor: row statistics [B, H, A], ``sink_weights`` [B, H, A, S],
        ``col_sum`` / ``col_mean`` [B, H, L].
    """
    w = weights.double()
    bsz, heads, length, _ = w.shape
    keep = mask.bool()
    answer = int((length - start).max())
    out = {
        k: torch.zeros(bsz, heads, answer, dtype=torch.float64)
        for k in (
            "entropy",
            "normalized_entropy",
            "prompt_mass",
            "max_weight",
            "effective_support",
            "diag_log",
            "prev_weight",
        )
    }
    out["sink_weights"] = torch.zeros(bsz, heads, answer, len(sinks), dtype=torch.float64)
    out["col_sum"] = torch.zeros(bsz, heads, length, dtype=torch.float64)
    counts = torch.zeros(bsz, length, dtype=torch.float64)
    j = torch.arange(length)
    for b in range(bsz):
        first = int((~keep[b]).sum())
        s = int(start[b])
        for a in range(length - s):
            p = s + a
            row = w[b, :, p]  # [H, L]
            visible = keep[b] & (j <= p) & ((j > p - window) if window else True)
            n = int(visible.sum())
            ent = -(row * torch.log(row.clamp_min(1e-300))).sum(-1)
            out["entropy"][b, :, a] = ent
            out["normalized_entropy"][b, :, a] = ent / torch.log(torch.tensor(float(n))) if n > 1 else 0.0
            out["prompt_mass"][b, :, a] = row[:, :s].sum(-1)
            out["max_weight"][b, :, a] = row.max(-1).values
            out["effective_support"][b, :, a] = 1.0 / (row**2).sum(-1)
            out["diag_log"][b, :, a] = torch.log(row[:, p].clamp_min(diag_eps))
            out["prev_weight"][b, :, a] = row[:, p - 1] if p > s else 0.0
            for k, off in enumerate(sinks):
                pos = first + off
                out["sink_weights"][b, :, a, k] = row[:, pos] if 0 <= pos < length and visible[pos] else 0.0
            out["col_sum"][b] += row
            counts[b] += visible.double()
    out["col_mean"] = torch.where(counts[:, None] > 0, out["col_sum"] / counts[:, None].clamp_min(1), 0.0)
    return out


def eager_logit_statistics(logits, ids, start):
    """The logit statistics from full eager logits, by sorting (answer-aligned ``[B, A, 56]``)."""
    bsz, length, _ = logits.shape
    answer = int((length - start).max())
    out = torch.zeros(bsz, answer, 56, dtype=torch.float64)
    for b in range(bsz):
        for a in range(length - int(start[b])):
            p = int(start[b]) + a
            logp = torch.log_softmax(logits[b, p - 1].double(), -1)
            y = int(ids[b, p])
            srt = torch.sort(logp, descending=True).values
            probs = srt.exp()
            rank = 1 + int((logp > logp[y]).sum())
            ent = -(logp.exp() * logp).sum()
            ranked = torch.zeros(50, dtype=torch.float64)
            ranked[: min(50, probs.shape[0])] = probs[:50]
            scalars = torch.tensor(
                [logp[y], rank, ent, probs[0] - probs[1], probs[:5].sum(), srt[0] - logp[y]]
            )
            out[b, a] = torch.cat([scalars, ranked])
    return out


@pytest.fixture(scope="session")
def helpers():
    """The helpers of this file (tests import nothing from conftest directly)."""
    return SimpleNamespace(
        tiny_models=tiny_models,
        padded_batch=padded_batch,
        eager_forward=eager_forward,
        eager_statistics=eager_statistics,
        eager_logit_statistics=eager_logit_statistics,
    )
