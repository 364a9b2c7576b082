"""Extraction, induction ranking and TOHA's dense path on a tiny random Llama (real record_forward)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION
from halluprobe.blocks import induction_scores, rank_heads
from halluprobe.detectors import mtopdiv
from halluprobe.features import HEAD_STATS, ProxyExtractor, reduce_forward
from halluprobe.features._toha import recorded_mtopdiv
from transformers import LlamaConfig, LlamaForCausalLM


def _llama(hidden_size: int) -> LlamaForCausalLM:
    """A random 3-layer Llama with 4 query / 2 KV heads of ``hidden_size / 4`` dims, "attnstats" attention."""
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101, hidden_size=hidden_size, intermediate_size=96, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=3, initializer_range=0.3,
    )  # fmt: skip
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tiny():
    return _llama(64)


def _eager_attn(model, ids):
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    finally:
        model.set_attn_implementation(previous)


def test_records_match_eager_attention(tiny):
    rng = np.random.default_rng(0)
    encoded = [(rng.integers(5, 100, 17).tolist(), 11), (rng.integers(5, 100, 9).tolist(), 4)]
    ext = ProxyExtractor(tiny, SimpleNamespace(pad_token_id=0))
    assert ext.hidden_layers == (1,)
    fs = ext.forward(encoded)
    recs = reduce_forward(fs, ["a", "b"])
    for rec, (ids, start) in zip(recs, encoded, strict=True):
        att = _eager_attn(tiny, ids)
        assert rec.answer_len == len(ids) - start and rec.prompt_len == start
        for layer in range(3):
            p = att[layer][0, :, start:, :].double()  # [H, R, L]
            ent = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
            np.testing.assert_allclose(rec.head_stats[layer, :, HEAD_STATS.index("entropy"), 0], ent.mean(-1),
                                       rtol=1e-4, atol=1e-5)  # fmt: skip
            np.testing.assert_allclose(rec.head_stats[layer, :, HEAD_STATS.index("bos_sink"), 0],
                                       p[..., 0].mean(-1), rtol=1e-4, atol=1e-6)  # fmt: skip
            # normalised column sums: mean weight on key j over the answer rows that see it
            r = p.shape[1]
            seen = torch.tensor([min(r, len(ids) - j) for j in range(len(ids))], dtype=torch.float64)
            col = (p.sum(1) / seen).sort(-1, descending=True).values[:, :10]
            np.testing.assert_allclose(rec.sink_topk[layer, :, : col.shape[1]], col, rtol=1e-4, atol=1e-6)


def test_toha_reads_the_blocks_of_the_one_recorded_forward(tiny):
    """MTopDiv from the recorded forward equals the eager output_attentions reference (float tolerance)."""
    rng = np.random.default_rng(1)
    encoded = [(rng.integers(5, 100, 12).tolist(), 8), (rng.integers(5, 100, 7).tolist(), 3)]
    # contrast=False: the contrast block's own forward (without the context) is not TOHA's
    ext = ProxyExtractor(tiny, SimpleNamespace(pad_token_id=0), layers=(0, 2), toha=True, contrast=False)
    calls = []
    handles = [
        tiny.model.layers[0].register_forward_pre_hook(lambda m, a: calls.append("layer0")),
        tiny.register_forward_pre_hook(lambda m, a, kw: calls.append(kw), with_kwargs=True),
    ]
    ext.encode = lambda ex: ex.encoded  # type: ignore[method-assign]  # token ids without a tokenizer
    try:
        recs = ext(
            [
                SimpleNamespace(id=str(b), encoded=e, context="c d", question="", answer="a b")
                for b, e in enumerate(encoded)
            ]
        )
    finally:
        for h in handles:
            h.remove()
    assert calls == ["layer0"]  # one forward of the body, never the LM with output_attentions
    got = recorded_mtopdiv(ext.forward(encoded))
    assert got.shape == (2, 2, 4)
    for b, (ids, start) in enumerate(encoded):
        att = _eager_attn(tiny, ids)
        for i, layer in enumerate((0, 2)):
            for h in range(4):
                ref = mtopdiv(att[layer][0, h, start:].double().numpy(), start)
                assert float(got[b, i, h]) == pytest.approx(ref, abs=1e-5)
                assert float(recs[b].mtopdiv[i, h]) == pytest.approx(ref, abs=1e-5)


def test_toha_code_path_never_asks_for_output_attentions():
    import inspect

    import halluprobe.features._extract
    import halluprobe.features._toha

    assert "output_attentions" not in inspect.getsource(halluprobe.features._toha)
    assert "output_attentions" not in inspect.getsource(halluprobe.features._extract)


def test_induction_scores_and_ranking(tiny):
    scores = induction_scores(tiny, block=8, n_seqs=2)
    assert scores.shape == (3, 4) and np.all((scores >= 0) & (scores <= 1))
    assert tiny.config._attn_implementation == ATTN_IMPLEMENTATION
    order = rank_heads(scores, (1, 2))
    assert sorted(order) == list(range(8))
    flat = scores[[1, 2]].reshape(-1)
    assert all(flat[a] >= flat[b] for a, b in zip(order, order[1:], strict=False))
    with pytest.raises(ValueError, match="block"):
        induction_scores(tiny, block=1)


def test_graph_buckets_need_a_cuda_model(tiny):
    with pytest.raises(ValueError, match="CUDA"):
        ProxyExtractor(tiny, SimpleNamespace(pad_token_id=0), graph_buckets=(64, 32))


@pytest.mark.gpu
def test_graph_replays_give_the_eager_records():
    model = _llama(256).cuda()  # head dim 64; fp32: replays and eager batches agree to rounding
    rng = np.random.default_rng(2)
    examples = [SimpleNamespace(id=f"e{i}") for i in range(3)]
    encoded = [(rng.integers(5, 100, n).tolist(), n - a) for n, a in ((40, 12), (33, 20), (57, 9))]
    eager = ProxyExtractor(model, SimpleNamespace(pad_token_id=0))
    graphed = ProxyExtractor(model, SimpleNamespace(pad_token_id=0), graph_buckets=(64, 32))
    want = reduce_forward(eager.forward(encoded), [ex.id for ex in examples])
    got = graphed._replayed(examples, encoded)
    for g, w in zip(got, want, strict=True):
        assert (g.id, g.answer_len, g.prompt_len) == (w.id, w.answer_len, w.prompt_len)
        for name in ("head_stats", "sink_topk", "token_prev", "logit_pooled", "token_logit", "hidden_pooled"):
            np.testing.assert_allclose(getattr(g, name), getattr(w, name), rtol=1e-3, atol=1e-4, err_msg=name)


def test_inputs_longer_than_the_positions_are_refused_not_truncated(tiny, monkeypatch):
    import flashstats_hf

    limit = tiny.config.max_position_embeddings
    ext = ProxyExtractor(tiny, SimpleNamespace(pad_token_id=0))
    monkeypatch.setattr(flashstats_hf, "format_example", lambda tok, c, q, a: (list(range(len(c))), 3))
    ex = SimpleNamespace(id="long", context="x" * (limit + 1), question="q", answer="a")
    with pytest.raises(ValueError, match=f"'long' has {limit + 1} tokens .* at most {limit} positions"):
        ext.encode(ex)
    ok = SimpleNamespace(id="fits", context="x" * limit, question="q", answer="a")
    assert len(ext.encode(ok)[0]) == limit
