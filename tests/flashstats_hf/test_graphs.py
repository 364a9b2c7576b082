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


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101, hidden_size=192, intermediate_size=96, num_attention_heads=3,
        num_key_value_heads=1, num_hidden_layers=2, initializer_range=0.3,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def test_cpu_model_is_refused():
    with pytest.raises(ValueError, match="CUDA"):
        GraphedRecorder(_tiny("cpu"))


def _fields(stats):
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


def _poison_free_memory() -> list[torch.Tensor]:
    """Refills freed blocks of the caching allocator with out-of-range integers.

    A graph that read a tensor freed after its capture (the first GPU run's gather indices) then
    fails at once instead of by chance.
    """
    return [
        torch.full((n,), 2**40, dtype=torch.int64, device="cuda") for n in (1, 8, 64, 200) for _ in range(64)
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_replays_match_record_forward(arch):
    model = _tiny("cuda") if arch == "qwen3" else _tiny_llama()
    rec = GraphedRecorder(model)
    for seed in (1, 2, 3):  # the first call captures, the later ones replay with new tokens
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 101, (1, 200), generator=gen).cuda()
        junk = _poison_free_memory()
        got = rec(ids, response_start=130)
        del junk
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


def _capturing(monkeypatch):
    """Makes Transformers' mask builder behave as while a CUDA graph is being captured."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "is_tracing", lambda *a, **k: True)


@pytest.mark.parametrize("pooled", [False, True])
def test_captured_body_scores_every_layer_as_record_forward(monkeypatch, pooled):
    """What a capture records (run eagerly on the CPU, with Transformers believing it is capturing)."""
    from flashstats_hf.graphs import recorded_body, shape_plan
    from flashstats_hf.record import DEFAULT_REQUEST

    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 40), generator=torch.Generator().manual_seed(5))
    ref = record_forward(model, ids, response_start=27, logits=False, backend="torch")
    _capturing(monkeypatch)
    request = dataclasses.replace(
        DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    )
    plan = shape_plan((0, 1, 2), request, 40, 13, torch.device("cpu"), backend="torch")
    rows, lookups, columns = recorded_body(model.model, ids, plan, (0, 1, 2), pooled=pooled)
    if pooled:
        ent = ref.rows.entropy.double()
        want = torch.stack([ent.mean(-1), ent.std(-1, correction=0), ent.amin(-1), ent.amax(-1)], -1)
        torch.testing.assert_close(rows.entropy.double(), want, atol=1e-6, rtol=1e-6)
        return
    for fam, got in (("rows", rows), ("lookups", lookups), ("columns", columns)):
        for name, want in _fields(getattr(ref, fam)).items():
            torch.testing.assert_close(_fields(got)[name], want, atol=1e-6, rtol=1e-6, msg=f"{fam}.{name}")


def test_capture_without_the_packing_patch_would_leave_layers_unscored(monkeypatch):
    """The failure `unpacked_positions` prevents: a dense packed-sequence mask while capturing."""
    from flashstats_hf._recorder import Recorder
    from flashstats_hf.graphs import shape_plan
    from flashstats_hf.record import DEFAULT_REQUEST

    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 30), generator=torch.Generator().manual_seed(6))
    _capturing(monkeypatch)
    request = dataclasses.replace(
        DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    )
    plan = shape_plan((0, 1, 2), request, 30, 10, torch.device("cpu"), backend="torch")
    with pytest.warns(UserWarning, match="runs unscored"), torch.no_grad(), Recorder(plan) as rec:
        model.model(input_ids=ids, use_cache=False)
    assert rec.results == {}
