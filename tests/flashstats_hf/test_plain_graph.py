"""GraphedForward: the plain forward a graph captures calls SDPA causally, with no dense mask."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from flashstats_hf import ATTN_IMPLEMENTATION, GraphedForward
from transformers import AutoModelForCausalLM, masking_utils


def _sdpa_masks(monkeypatch, model, ids) -> list:
    """The ``attn_mask`` of every SDPA call of one body forward, with Transformers believing it captures."""
    from flashstats_hf.graphs import unpacked_positions

    seen = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return real(*args, **kwargs)

    monkeypatch.setattr(masking_utils, "is_tracing", lambda *a, **k: True)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad(), unpacked_positions():
        model.model(input_ids=ids, use_cache=False)
    return seen


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_captured_plain_forward_builds_no_dense_mask(helpers, monkeypatch, kind):
    ours, _ = helpers.tiny_models(kind)
    ids = torch.randint(3, 101, (1, 37), generator=torch.Generator().manual_seed(0))
    masks = _sdpa_masks(monkeypatch, ours, ids)
    assert masks and all(mask is None and causal for mask, causal in masks)
    # what a capture of the "sdpa" implementation does: Transformers builds the [1, 1, L, L] mask
    sdpa = AutoModelForCausalLM.from_config(copy.deepcopy(ours.config), attn_implementation="sdpa").eval()
    dense = _sdpa_masks(monkeypatch, sdpa, ids)
    assert dense and all(mask is not None and mask.shape[-2:] == (37, 37) for mask, _ in dense)


def test_graphed_forward_checks_its_model(helpers):
    ours, _ = helpers.tiny_models("qwen3")
    with pytest.raises(ValueError, match="CUDA"):
        GraphedForward(ours)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_replays_equal_the_eager_forward(helpers, kind):
    ours, _ = helpers.tiny_models(kind, "cuda")
    graphed = GraphedForward(ours, max_graphs=1)
    for seed, length in ((1, 130), (2, 130), (3, 77)):  # capture, replay, a new length
        ids = torch.randint(3, 101, (1, length), generator=torch.Generator().manual_seed(seed)).cuda()
        got = graphed(ids).clone()
        with torch.no_grad():
            want = ours.model(input_ids=ids, use_cache=False)[0]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert list(graphed._graphs) == [77]
    with pytest.raises(ValueError, match="max_graphs"):
        GraphedForward(ours, max_graphs=0)
    ours.config._attn_implementation = "sdpa"
    with pytest.raises(ValueError, match=ATTN_IMPLEMENTATION):
        GraphedForward(ours)
