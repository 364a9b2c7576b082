"""Bad inputs to record_forward and CachedRecorder get one named error, the same from both."""

from __future__ import annotations

import pytest
import torch
from flashstats_hf import CachedRecorder, record_forward


@pytest.fixture(scope="module")
def llama(helpers):
    return helpers.tiny_models("llama")[0]


@pytest.fixture
def ids():
    return torch.randint(3, 101, (2, 8), generator=torch.Generator().manual_seed(0))


def test_out_of_vocabulary_ids_name_the_vocabulary_size(llama, ids):
    bad = ids.clone()
    bad[0, 3] = 101
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 101\)"):
        record_forward(llama, bad, response_start=5)
    bad[0, 3] = -1
    with pytest.raises(ValueError, match="vocabulary size"):
        record_forward(llama, bad, response_start=5)
    rec = CachedRecorder(llama, prompt_len=5)
    with torch.no_grad(), rec, pytest.raises(ValueError, match=r"\[0, 101\)"):
        rec.feed(bad[:, :5])


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        (torch.full((2, 8), 0.5), "bool or integer tensor of 0/1"),
        (torch.ones(2, 8), "bool or integer tensor of 0/1"),
        (torch.full((2, 8), 2), r"only 0 \(padding\) and 1"),
    ],
    ids=["half", "float-ones", "two"],
)
def test_attention_masks_hold_zeros_and_ones(llama, ids, mask, match):
    with pytest.raises(ValueError, match=match):
        record_forward(llama, ids, response_start=5, attention_mask=mask)
    rec = CachedRecorder(llama, prompt_len=5)
    with torch.no_grad(), rec, pytest.raises(ValueError, match=match):
        rec.feed(ids[:, :5], attention_mask=mask[:, :5])


def test_an_all_padding_prompt_row_is_refused_by_both(llama, ids):
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :5] = 0  # example 1: no prompt token at all
    with pytest.raises(ValueError, match="response_start must lie"):
        record_forward(llama, ids, response_start=5, attention_mask=mask)
    rec = CachedRecorder(llama, prompt_len=5)
    with torch.no_grad(), rec, pytest.raises(ValueError, match="ending on a real token"):
        rec.feed(ids[:, :5], attention_mask=mask[:, :5])


def test_feed_with_another_batch_size_is_named(llama, ids):
    rec = CachedRecorder(llama, prompt_len=5)
    with torch.no_grad(), rec:
        rec.feed(ids[:, :5])
        with pytest.raises(ValueError, match=r"feed got 1 example\(s\) but the prompt in the cache has 2"):
            rec.feed(ids[:1, 5:6])
        rec.feed(ids[:, 5:7])  # the recorder still works
    assert rec.stats().answer_len.tolist() == [2, 2]


def test_a_module_that_is_not_a_causal_lm_is_named(ids):
    with pytest.raises(TypeError, match=r"record_forward expects a Transformers causal LM .*got Linear"):
        record_forward(torch.nn.Linear(2, 2), ids, response_start=5)
    with pytest.raises(TypeError, match="CachedRecorder expects a Transformers causal LM"):
        CachedRecorder(torch.nn.Linear(2, 2), prompt_len=5)
