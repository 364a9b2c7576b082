"""Tiny randomly initialised models and a locally trained word-level tokenizer (no downloads)."""

from __future__ import annotations

import pytest
import torch
from halubench_data import Example
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    T5ForTokenClassification,
)

CORPUS = [
    "The ferry leaves the harbour at 7 and the crossing takes 40 minutes .",
    "The museum opened in 1998 and has three floors of galleries .",
    "Maria founded the company in 2004 . Her brother Diego joined in 2010 .",
    "Who founded the company ? How long is the crossing ? When did the museum open ?",
    "True False Yes yes No no 0 1 predict : Document Claim Question Premise Hypothesis",
    "Determine if the hypothesis is true given the premise ?",
    "Answer the question using the context . The answer is supported by the document .",
]
SPECIALS = ["<pad>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = CHAT
    return tok


@pytest.fixture(scope="session")
def tiny_qwen2(tiny_tokenizer) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tiny_tokenizer.pad_token_id,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer) -> LlamaForCausalLM:
    # A saved Qwen2 checkpoint would be reloaded with Transformers' Qwen2Tokenizer, which ignores our
    # word-level tokenizer.json; Llama keeps the saved tokenizer class, so the CLI test saves a Llama.
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tiny_tokenizer.pad_token_id,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _t5_config(tok: PreTrainedTokenizerFast, **extra) -> T5Config:
    return T5Config(
        vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
        **extra,
    )  # fmt: skip


@pytest.fixture(scope="session")
def tiny_t5(tiny_tokenizer) -> T5ForConditionalGeneration:
    torch.manual_seed(1)
    return T5ForConditionalGeneration(_t5_config(tiny_tokenizer)).eval()


@pytest.fixture(scope="session")
def tiny_t5_classifier(tiny_tokenizer) -> T5ForTokenClassification:
    torch.manual_seed(2)
    return T5ForTokenClassification(_t5_config(tiny_tokenizer, num_labels=2)).eval()


def _example(i: int, label: int, split: str | None = "test", answer: str | None = None) -> Example:
    return Example(
        id=f"ex{i}",
        source="tiny",
        context="The ferry leaves the harbour at 7 . " * (1 + i % 3) + "The museum opened in 1998 .",
        question="When did the museum open ?",
        answer=answer
        or ("The museum opened in 1998 ." if label == 0 else "Maria founded the museum in 2004 ."),
        label=label,
        group=f"g{i // 2}",
        split=split,
    )


@pytest.fixture(scope="session")
def make_example():
    """Factory of small examples: ``make_example(i, label, split="test", answer=None)``."""
    return _example
