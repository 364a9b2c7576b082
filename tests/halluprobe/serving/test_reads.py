"""Detector-driven extraction: only what the detector reads is computed, and it equals a full extraction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, collate, record_forward
from halluprobe.features._extract import ProxyExtractor
from halluprobe.features._reads import DetectorReads, detector_reads, stopped_proxy

from .conftest import Ex, text, tiny_detector, tiny_model, tokenizer  # noqa: TID252


def test_a7h64_reads_two_layers_no_columns_no_logits():
    det = tiny_detector("A7H64", heads=(0, 5), layers=4)  # heads 0 and 5 of 4 per layer: layers 0 and 1
    reads = detector_reads(det, n_layers=4, n_heads=4)
    assert reads == DetectorReads(layers=(0, 1), lookups=reads.lookups, columns=False, logits=False,
                                  hidden_layers=det.hidden_layers_)  # fmt: skip
    full = ProxyExtractor(det.extractor().model, det.extractor().tokenizer, None, det.hidden_layers_)
    ext = det.extractor()
    assert ext.reads == reads  # the detector's extractor computes only its reads
    rng = np.random.default_rng(3)
    items = [Ex(f"x{i}", text(rng, 9 + i), text(rng, 2), text(rng, 3 + i)) for i in range(3)]
    got, want = ext(items), full(items)
    read = [0, 1]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.head_stats[read], w.head_stats[read], atol=1e-5)
        np.testing.assert_allclose(g.hidden_pooled, w.hidden_pooled, atol=1e-5)
        assert np.isnan(g.sink_topk).all() and np.isnan(g.logit_pooled).all()  # no T3, no logits
    np.testing.assert_allclose(det.score_records(got), det.score_records(want), atol=1e-6)


@pytest.mark.slow
def test_record_forward_stops_after_the_last_layer_it_reads():
    det = tiny_detector("A7", heads=(1,), layers=4)
    model = det.extractor().model
    ran: list[int] = []
    hooks = [
        layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
        for i, layer in enumerate(model.model.layers)
    ]
    ext = det.extractor()
    batch = collate([ext.encode(Ex("a", "w1 w2 w3", "w4", "w5 w6"))], pad_token_id=0)
    try:
        part = record_forward(model, batch.input_ids, response_start=batch.response_start, layers=[1],
                              logits=False, hidden_layers=[1])  # fmt: skip
        assert ran == [0, 1]
        ran.clear()
        whole = record_forward(model, batch.input_ids, response_start=batch.response_start, hidden_layers=[1])
        assert ran == [0, 1, 2, 3]
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(part.rows.entropy[:, 0], whole.rows.entropy[:, 1], atol=1e-5, rtol=0)
    torch.testing.assert_close(part.hidden, whole.hidden)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["A64L9", "A7H64"])
def test_predictions_equal_a_full_extraction(kind):
    det = tiny_detector(kind, heads=(2, 9), layers=3)
    assert det.extractor().reads.columns == ("A64" in kind)
    rng = np.random.default_rng(8)
    triples = [(text(rng, 10), text(rng, 2), text(rng, 4)) for _ in range(3)]
    got = det.predict_batch(triples)
    det.extractor().reads = None  # a full extraction
    want = det.predict_batch(triples)
    for g, w in zip(got, want, strict=True):
        assert g.probability == pytest.approx(w.probability, abs=1e-6)
        np.testing.assert_allclose(g.token_scores, w.token_scores, atol=1e-6)


@pytest.mark.parametrize(
    ("reads", "kept"),
    [
        (DetectorReads(layers=(0, 1), lookups=True, columns=False, logits=False, hidden_layers=(1,)), 2),
        (DetectorReads(layers=(0,), lookups=False, columns=False, logits=False, hidden_layers=(2,)), 3),
        (DetectorReads(layers=(1,), lookups=True, columns=True, logits=True, hidden_layers=(1,)), 5),
        (DetectorReads(layers=(4,), lookups=True, columns=False, logits=False, hidden_layers=(1,)), 5),
        (DetectorReads(layers=(0,), lookups=True, columns=False, logits=False, hidden_layers=(5,)), 5),
    ],
    ids=["A7H64-L5-stop2", "hidden2-stop3", "logits-whole", "last-layer-whole", "final-normed-whole"],
)
def test_stopped_proxy_records_what_is_read_equal_to_the_whole_stack(reads, kept):
    model = tiny_model(5)
    view = stopped_proxy(model, reads)
    assert len(view.model.layers) == kept and len(model.model.layers) == 5  # the model is left whole
    assert (view is model) == (kept == 5)
    assert all(a is b for a, b in zip(view.model.layers, model.model.layers, strict=False))  # shared weights
    rng = np.random.default_rng(4)
    ext = ProxyExtractor(model, tokenizer())
    encoded = [ext.encode(Ex(f"s{i}", text(rng, 7 + 3 * i), text(rng, 2), text(rng, 4))) for i in range(2)]
    batch = collate(encoded, pad_token_id=0)
    ran: list[int] = []
    hooks = [
        layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
        for i, layer in enumerate(model.model.layers)
    ]
    try:
        args = dict(response_start=batch.response_start, attention_mask=batch.attention_mask,
                    layers=reads.layers, logits=reads.logits, hidden_layers=reads.hidden_layers)  # fmt: skip
        got = record_forward(view, batch.input_ids, **args)
        assert max(ran) < kept  # the view has no layer past the cut
        want = record_forward(model, batch.input_ids, **args)
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(got.rows.entropy, want.rows.entropy, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.hidden, want.hidden, atol=1e-5, rtol=0)
    if view is not model:  # a hook put on the view's body stays off the model's
        view.model.register_forward_hook(lambda m, a, o: None)
        assert not model.model._forward_hooks


@pytest.mark.parametrize("family", ["qwen3", "gpt2"])
def test_stopped_proxy_of_other_families(family):
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    if family == "qwen3":  # per-layer attention types, looked up by layer index
        cfg = Qwen3Config(vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, num_hidden_layers=5,
                          max_position_embeddings=128)  # fmt: skip
        cfg._attn_implementation = ATTN_IMPLEMENTATION
        model, layers = Qwen3ForCausalLM(cfg).eval(), lambda m: m.model.layers
    else:  # decoder layers in `.h` of a body named `transformer`
        cfg = GPT2Config(vocab_size=101, n_embd=64, n_layer=5, n_head=4, n_positions=128, bos_token_id=1,
                         eos_token_id=1)  # fmt: skip
        cfg._attn_implementation = ATTN_IMPLEMENTATION
        model, layers = GPT2LMHeadModel(cfg).eval(), lambda m: m.transformer.h
    reads = DetectorReads(layers=(0, 1), lookups=True, columns=False, logits=False, hidden_layers=(2,))
    view = stopped_proxy(model, reads)
    assert len(layers(view)) == 3 and len(layers(model)) == 5
    ids = torch.randint(5, 100, (1, 30), generator=torch.Generator().manual_seed(1))
    args = dict(response_start=20, layers=reads.layers, logits=False, hidden_layers=reads.hidden_layers)
    got, want = record_forward(view, ids, **args), record_forward(model, ids, **args)
    torch.testing.assert_close(got.rows.entropy, want.rows.entropy, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.hidden, want.hidden, atol=1e-5, rtol=0)
