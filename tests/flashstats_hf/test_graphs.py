"""CUDA-graph-captured recorded forwards (flashstats_hf.graphs) against record_forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, record_forward
from flashstats_hf.graphs import POOL_NAMES, GraphedRecorder
from transformers import Qwen3Config, Qwen3ForCausalLM


def _tiny(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=101,
        hidden_size=128,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        head_dim=64,
        initializer_range=0.3,
    )
    model = Qwen3ForCausalLM(cfg).to(
        device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32
    )
    model.eval()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def test_cpu_model_is_refused():
    with pytest.raises(ValueError, match="CUDA"):
        GraphedRecorder(_tiny("cpu"))


def _fields(stats):
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


@pytest.mark.gpu
def test_replays_match_record_forward():
    model = _tiny("cuda")
    rec = GraphedRecorder(model)
    for seed in (1, 2, 3):  # the first call captures, the later ones replay with new tokens
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 101, (1, 200), generator=gen).cuda()
        got = rec(ids, response_start=130)
        ref = record_forward(model, ids, response_start=130, logits=False, backend="triton")
        assert got.layers == ref.layers
        for fam in ("rows", "lookups", "columns"):
            for name, want in _fields(getattr(ref, fam)).items():
                have = _fields(getattr(got, fam))[name]
                assert have.shape == want.shape, (fam, name)
                torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5, msg=f"{fam}.{name} seed {seed}")


@pytest.mark.gpu
def test_pooled_mode_reduces_over_answer_tokens():
    model = _tiny("cuda")
    rec = GraphedRecorder(model, pooled=True)
    ids = torch.randint(0, 101, (1, 180), generator=torch.Generator().manual_seed(4)).cuda()
    for _ in range(2):
        got = rec(ids, response_start=100)
    ref = record_forward(model, ids, response_start=100, logits=False, backend="triton")
    ent = ref.rows.entropy.double()  # [1, NL, Hq, A]
    want = torch.stack([ent.mean(-1), ent.std(-1, correction=0), ent.amin(-1), ent.amax(-1)], -1)
    assert got.rows.entropy.shape == (1, 3, 4, len(POOL_NAMES))
    torch.testing.assert_close(got.rows.entropy.double(), want, atol=1e-5, rtol=1e-5)
    sinks = ref.lookups.sink_weights.double()  # [1, NL, Hq, A, S]
    torch.testing.assert_close(got.lookups.sink_weights[..., 3].double(), sinks.amax(3), atol=1e-6, rtol=1e-6)
