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


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_output_attentions_under_attnstats_raises_a_named_error(helpers, kind, ids):
    """No silent empty tuple: the error says what gives statistics or weights instead."""
    from flashstats_hf import AttentionWeightsUnavailableError

    model = helpers.tiny_models(kind)[0]
    assert issubclass(AttentionWeightsUnavailableError, ValueError)
    with torch.no_grad(), pytest.raises(AttentionWeightsUnavailableError, match="record_forward") as err:
        model(ids, output_attentions=True)
    assert "dense_heads" in str(err.value) and "eager" in str(err.value)
    with torch.no_grad():  # output_attentions=False (or absent) runs as before
        assert model(ids, output_attentions=False).attentions is None
    assert record_forward(model, ids, response_start=5).rows is not None


def test_forward_stats_prints_a_short_summary(llama, ids):
    fs = record_forward(llama, ids, response_start=5, hidden_layers=[1], dense_heads={0: [1, 2]})
    text = repr(fs)
    lines = text.splitlines()
    assert len(lines) <= 10 and len(text) < 1000, text
    assert "tensor(" not in text  # shapes, not values
    assert lines[0].startswith("ForwardStats(B=2, A=3, L=8, layers=(0, 1)")
    assert (
        "rows: entropy, normalized_entropy, prompt_mass, max_weight, effective_support [2, 2, 4, 3]" in text
    )
    assert f"logit_stats: [2, 3, {fs.logit_stats.shape[-1]}]" in text
    assert f"hidden: [2, 1, 3, {llama.config.hidden_size}] at hidden_layers (1,)" in text
    assert "lookups: diag_log, prev_weight [2, 2, 4, 3]; sink_weights [2, 2, 4, 3, 1]" in text
    assert "column_topk: values, index [2, 2, 4, 16]" in text and "columns:" not in text
    full = record_forward(llama, ids, response_start=5, logits=False, full_columns=True)
    assert "columns: sum, mean [2, 2, 4, 8]" in repr(full) and "column_topk" not in repr(full)
    assert "dense: layer 0 heads (1, 2)" in text and "absent" not in text
    bare = record_forward(llama, ids, response_start=5, logits=False)
    assert "absent: logit_stats, hidden, dense" in repr(bare) and "logit_stats:" not in repr(bare)
    assert str(bare) == repr(bare)
