"""TOHA scoring never asks the model for attention maps: one recorded forward, no output_attentions."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION
from halluprobe.detectors._published import TOHA, mtopdiv, toha_matrix
from halluprobe.features import ProxyExtractor
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=3, initializer_range=0.3,
    )  # fmt: skip
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    return LlamaForCausalLM(cfg).eval()


def _forbid_attention_maps(model, monkeypatch) -> list:
    """Every way to a full attention map raises; returns the hook handles (remove them after)."""

    def no_output_attentions(module, args, kwargs):
        if kwargs.get("output_attentions"):
            raise AssertionError(f"{type(module).__name__} was called with output_attentions=True")

    def no_weights(module, args, output):
        if isinstance(output, tuple) and len(output) > 1 and output[1] is not None:
            raise AssertionError(f"{type(module).__name__} returned attention weights")

    def refuse(*args, **kwargs):
        raise AssertionError("the model's eager attention (a full L x L map) was called")

    monkeypatch.setattr(modeling_llama, "eager_attention_forward", refuse)
    monkeypatch.setattr(model, "set_attn_implementation", refuse)
    handles = [m.register_forward_pre_hook(no_output_attentions, with_kwargs=True) for m in model.modules()]
    handles += [layer.self_attn.register_forward_hook(no_weights) for layer in model.model.layers]
    return handles


def test_guards_catch_an_output_attentions_forward(tiny, monkeypatch):
    """The guards fail on the path TOHA must not take (so the test below can fail)."""
    handles = _forbid_attention_maps(tiny, monkeypatch)
    try:
        with pytest.raises(AssertionError, match="output_attentions=True"), torch.no_grad():
            tiny(input_ids=torch.tensor([[5, 6, 7]]), output_attentions=True)
        with pytest.raises(AssertionError, match="eager attention"):
            tiny.set_attn_implementation("eager")
    finally:
        for h in handles:
            h.remove()


def test_toha_scores_from_one_forward_without_attention_maps(tiny, monkeypatch):
    rng = np.random.default_rng(2)
    shapes = [(14, 9), (9, 4), (17, 12), (11, 5)]
    encoded = [(rng.integers(5, 100, n).tolist(), start) for n, start in shapes]
    batch = [
        SimpleNamespace(id=str(i), encoded=e, context="c d", question="", answer="a b")
        for i, e in enumerate(encoded)
    ]
    ext = ProxyExtractor(tiny, SimpleNamespace(pad_token_id=0), layers=(0, 2), toha=True)
    ext.encode = lambda ex: ex.encoded  # type: ignore[method-assign]  # token ids without a tokenizer
    ext.encode_bare = lambda ex: [1, 7, 9]  # type: ignore[method-assign]  # the contrast forward's prompt
    handles = _forbid_attention_maps(tiny, monkeypatch)
    try:
        recs = ext(batch)
        X = toha_matrix(recs)  # [n, NL * H]
        detector = TOHA(max_heads=3).fit(X, np.array([0, 1, 0, 1]))
        proba = detector.predict_proba(X)
    finally:
        for h in handles:
            h.remove()
    monkeypatch.undo()
    assert X.shape == (4, 2 * 4) and proba.shape == (4, 2) and np.isfinite(proba).all()
    for rec, (ids, start) in zip(recs, encoded, strict=True):  # the values are TOHA's: eager reference
        tiny.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                att = tiny(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        finally:
            tiny.set_attn_implementation(ATTN_IMPLEMENTATION)
        for i, layer in enumerate((0, 2)):
            want = [mtopdiv(att[layer][0, h, start:].double().numpy(), start) for h in range(4)]
            np.testing.assert_allclose(rec.mtopdiv[i], want, atol=1e-5)
