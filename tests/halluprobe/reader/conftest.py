"""A tiny random Llama with a byte-level BPE tokenizer, saved as a proxy folder, and a learnable toy.

The toy: a context of random words, an answer of words copied from it; a hallucinated answer has one
word replaced by a word from a vocabulary that no context uses (the planted unsupported token), and
source "a" annotates that word as a span. A reader can learn to flag the planted words.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from halubench_data import Example, Span

WORDS = ["".join(p) for p in itertools.product("bdfgklmnpt", "aeiou", "rsx")][:90]
"""Letter-only words, each one byte-level BPE token after a space."""
CONTEXT_WORDS, PLANTED = WORDS[:70], WORDS[80:]
TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def toy_tokenizer():
    """A byte-level BPE tokenizer trained on the toy words, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<pad>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator([" " + " ".join(WORDS)] * 20 + ["user: assistant:\n"] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>")
    fast.chat_template = TEMPLATE
    return fast


def toy_model(vocab: int, width: int = 64, layers: int = 2, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=width, intermediate_size=96, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=layers, max_position_embeddings=256,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def save_proxy(folder, width: int = 64, layers: int = 2) -> str:
    """A tiny proxy folder (weights, config, tokenizer) that `flashstats_hf.load_model` reads."""
    tok = toy_tokenizer()
    toy_model(len(tok), width, layers).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def toy_examples(n: int = 160, seed: int = 0, spans_in=("a",)) -> list[Example]:
    """``n`` labelled toy examples of sources a and b (every fifth validation, every seventh test)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        context = [str(w) for w in rng.choice(CONTEXT_WORDS, 12)]
        answer = [str(w) for w in rng.choice(context, 6)]
        label, spans = i % 2, ()
        if label:
            k = int(rng.integers(0, 6))
            answer[k] = str(rng.choice(PLANTED))
            start = len(" ".join(answer[:k])) + (1 if k else 0)
            spans = (Span(start, start + len(answer[k])),)
        source = "a" if i % 3 else "b"
        split = "validation" if i % 5 == 0 else "test" if i % 7 == 0 else "train"
        out.append(Example(f"e{i}", source, " ".join(context), "q", " ".join(answer), label, f"g{i}", split,
                           spans if source in spans_in else ()))  # fmt: skip
    return out


FAST = {"epochs": 8.0, "max_batch_tokens": 512, "learning_rate": 1e-2, "head_learning_rate": 5e-2,
        "evals_per_epoch": 1, "patience": 3}  # fmt: skip
"""Reader settings that learn the toy in seconds on a CPU."""


@pytest.fixture(scope="session")
def toy_proxy(tmp_path_factory) -> str:
    return save_proxy(tmp_path_factory.mktemp("proxy"))


@pytest.fixture(scope="session")
def fitted_reader(toy_proxy):
    """A reader fitted on the toy's train and validation splits (session-wide: it takes seconds)."""
    from halluprobe.reader import Reader

    rows = [e for e in toy_examples() if e.split != "test"]
    return Reader(toy_proxy, device="cpu", **FAST).fit(rows)
