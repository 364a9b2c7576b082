"""T4 in the same forward: record_forward(dense_heads=...) against eager output_attentions."""

from __future__ import annotations

import pytest
import torch
from flashstats_hf import _recorder, record_forward

TOL = {"cpu": dict(atol=2e-5, rtol=1e-4), "cuda": dict(atol=2e-3, rtol=2e-3)}  # cuda: TF32-class dots
# kind, total lengths, answer lengths, layer -> heads
CASES = {
    "llama-B1-L11-A4": ("llama", [11], [4], {1: (3, 0)}),
    "qwen3-B3-L14-A8-padded": ("qwen3", [14, 4, 9], [8, 2, 1], {0: (1, 2), 2: (0, 1, 2, 3)}),
    "mistral-window-B2-L11-A7": ("mistral", [11, 9], [7, 3], {0: (2,), -1: (1, 3)}),
    "gemma2-softcap-B2-L10-A4": ("gemma2", [10, 13], [4, 2], {0: (0, 3), 1: (2,)}),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_dense_blocks_match_eager_attention(helpers, case, pack, device):
    kind, lengths, answers, heads = CASES[case]
    ours, eager = helpers.tiny_models(kind, device)
    ids, mask, start = helpers.padded_batch(lengths, answers, device=device)
    fs = record_forward(ours, ids, response_start=start, attention_mask=mask, pack=pack, dense_heads=heads)
    ref = helpers.eager_forward(eager, ids, mask).attentions
    n = ours.config.num_hidden_layers
    want = {layer % n: hs for layer, hs in heads.items()}
    assert fs.dense_heads == want and sorted(fs.dense) == sorted(want)
    length = ids.shape[1]
    for layer, hs in want.items():
        block = fs.dense[layer]
        assert block.dtype == torch.float32 and block.shape == (len(lengths), len(hs), max(answers), length)
        for b, a in enumerate(answers):
            pad = length - lengths[b]
            got = block[b, :, :a]  # [H', a, L]
            expect = ref[layer][b, list(hs), length - a :].float()
            torch.testing.assert_close(got[..., pad:], expect[..., pad:], **TOL[device])
            assert not got[..., :pad].any() and not block[b, :, a:].any()


def test_only_the_requested_heads_are_materialised(helpers, monkeypatch):
    ours, _ = helpers.tiny_models("qwen3")
    ids, mask, start = helpers.padded_batch([12, 9], [5, 3])
    calls = []
    original = _recorder.dense_response_block

    def spy(q, k, **kw):
        out = original(q, k, **kw)
        calls.append(tuple(out.shape))
        return out

    monkeypatch.setattr(_recorder, "dense_response_block", spy)
    fs = record_forward(ours, ids, response_start=start, attention_mask=mask, dense_heads={1: [2, 0]})
    assert calls == [(2, 2, 5, 12)]  # one layer, two heads: [B, 2, R, L]
    assert list(fs.dense) == [1] and fs.dense[1].shape == (2, 2, 5, 12)
    calls.clear()
    fs = record_forward(ours, ids, response_start=start, attention_mask=mask)
    assert calls == [] and fs.dense == {}


def test_dense_heads_are_checked(helpers):
    ours, _ = helpers.tiny_models("llama")
    ids, mask, start = helpers.padded_batch([8], [3])
    with pytest.raises(ValueError, match="not scored"):
        record_forward(ours, ids, response_start=start, layers=[0], dense_heads={1: (0,)})
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        record_forward(ours, ids, response_start=start, dense_heads={0: (4,)})
    with pytest.raises(TypeError, match="non-empty sequence"):
        record_forward(ours, ids, response_start=start, dense_heads={0: 1})
    with pytest.raises(TypeError, match="mapping"):
        record_forward(ours, ids, response_start=start, dense_heads=[0])
