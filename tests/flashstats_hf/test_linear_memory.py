"""Soft-capped and sliding-window layers never materialise an L x L score matrix (CPU path).

The largest single allocation of a forward is read from PyTorch's profiler (``profile_memory``): with
the ``attnstats`` implementation it stays bounded as ``L`` doubles (the chunked kernels bound each
temporary), while the eager implementation, measured the same way as a control, grows as ``L^2``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, record_forward
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, Gemma2Config

HEADS = 4
LENGTHS = (1024, 2048)


def _gemma2(impl: str) -> torch.nn.Module:
    """A tiny Gemma-2: layer 0 soft-capped with a sliding window of 64, layer 1 soft-capped, global."""
    config = Gemma2Config(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=HEADS,
        num_key_value_heads=2, num_hidden_layers=2, head_dim=16, sliding_window=64,
        attn_logit_softcapping=3.0, final_logit_softcapping=5.0, query_pre_attn_scalar=16,
    )  # fmt: skip
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl).eval()


def _largest_allocation(fn) -> int:
    """Bytes of the largest allocation any single operator made while ``fn`` ran."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(e.cpu_memory_usage for e in prof.events())


def _scores_bytes(length: int) -> int:
    """One fp32 score matrix over every head: what a dense soft-capped path allocates."""
    return HEADS * length * length * 4


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize("mode", [pytest.param("plain", marks=pytest.mark.slow), "recorded"])
def test_softcap_and_window_layers_use_memory_linear_in_length(mode):
    model = _gemma2(ATTN_IMPLEMENTATION)
    sizes = []
    for length in LENGTHS:
        ids = torch.randint(3, 101, (1, length))
        if mode == "plain":
            sizes.append(_largest_allocation(lambda ids=ids: model.model(input_ids=ids, use_cache=False)))
        else:
            sizes.append(
                _largest_allocation(
                    lambda ids=ids, n=length: record_forward(model, ids, response_start=n - 300, logits=False)
                )
            )
    assert sizes[1] < _scores_bytes(LENGTHS[1]) / 2, sizes
    assert sizes[1] <= 2.5 * sizes[0], sizes  # doubling L at most doubles the largest temporary


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_the_measurement_sees_a_quadratic_path():
    """Control: the eager implementation (dense scores) grows fourfold when L doubles."""
    model = _gemma2("eager")
    sizes = []
    for length in LENGTHS:
        ids = torch.randint(3, 101, (1, length))
        sizes.append(_largest_allocation(lambda ids=ids: model.model(input_ids=ids, use_cache=False)))
    assert sizes[1] >= _scores_bytes(LENGTHS[1]), sizes
    assert sizes[1] >= 3.5 * sizes[0], sizes
