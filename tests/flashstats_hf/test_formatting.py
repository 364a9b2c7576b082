"""format_example on chat templates (a Qwen3-style ``<think>`` template on a local tokenizer) and collate."""

from __future__ import annotations

import pytest
import torch
from flashstats_hf import collate, format_example
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# Our own template with the behaviour of Qwen3's: the final assistant turn is wrapped in an empty
# think block, and ``enable_thinking=False`` adds the same block to the generation prompt. (No Qwen3
# tokenizer is available offline, so the template logic is exercised on a small local tokenizer.)
QWEN3_STYLE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and loop.last %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m.content.lstrip('\\n') + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)
# The same without the switch: the think block then appears only once the answer is rendered.
NO_SWITCH = QWEN3_STYLE.replace("enable_thinking is defined and enable_thinking is false", "false")
SPECIALS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]


@pytest.fixture(scope="module")
def tokenizer():
    """A word-level tokenizer with the chat special tokens, built locally."""
    words = "the a tower is in paris it was built 1889 when what who . ? , user assistant".split()
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    vocab.update({ch: len(vocab) + i for i, ch in enumerate("\n ")})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]|\s"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[UNK]")
    fast.add_special_tokens({"additional_special_tokens": SPECIALS})
    return fast


@pytest.mark.parametrize("template", [QWEN3_STYLE, NO_SWITCH], ids=["enable_thinking", "no-switch"])
def test_qwen3_style_template_puts_think_block_in_the_prompt(tokenizer, template):
    tokenizer.chat_template = template
    ids, start = format_example(
        tokenizer, "the tower is in paris .", "when was it built ?", "it was built 1889 ."
    )
    prompt = tokenizer.decode(ids[:start])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert tokenizer.decode(ids[start:]) == "it was built 1889 ."
    assert tokenizer.convert_ids_to_tokens(ids[start]) == "it"
    assert "<|im_end|>" not in tokenizer.decode(ids)[-12:]


def test_bad_inputs_and_templates_raise(tokenizer):
    tokenizer.chat_template = QWEN3_STYLE
    with pytest.raises(ValueError, match="answer must not be empty"):
        format_example(tokenizer, "the tower", "what ?", "  ")
    with pytest.raises(TypeError, match="answer must be a str"):
        format_example(tokenizer, "the tower", "what ?", 3)
    tokenizer.chat_template = QWEN3_STYLE.replace("m.content.lstrip('\\n')", "m.content.upper()")
    with pytest.raises(ValueError, match="locate"):
        format_example(tokenizer, "the tower", "what ?", "it was built")
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        format_example(tokenizer, "the tower", "what ?", "it")


def test_collate_left_pads_and_shifts_response_start():
    batch = collate([([5, 6, 7, 8], 2), ([9, 10], 1), ([1, 2, 3], 2)], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [0, 0, 9, 10], [0, 1, 2, 3]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]]
    assert batch.response_start.tolist() == [2, 3, 3]
    assert batch.to("cpu").input_ids.dtype == torch.int64
    with pytest.raises(ValueError, match="response_start must lie"):
        collate([([1, 2], 2)])
    with pytest.raises(ValueError, match="at least one example"):
        collate([])
