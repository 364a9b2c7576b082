"""Synthetic ForwardStats and records for halluprobe tests (the ForwardStats contract is fixed)."""

import numpy as np
import pytest
import torch
from flashstats_hf import LOGIT_STAT_NAMES
from flashstats_hf.types import ForwardStats
from flashstats_kernels.types import ColumnStats, LookupStats, RowStats
from halluprobe.features import HEAD_STATS, MAX_SINKS, ExampleRecord

LOGIT_NAMES = LOGIT_STAT_NAMES


def synth_forward(answer_lens=(4, 3), prompt_lens=(5, 6), nl=2, h=3, seed=0, nh=1, dm=8):
    """A padded batch of ForwardStats with NaN poison wherever an answer or key does not exist."""
    g = torch.Generator().manual_seed(seed)
    b, a = len(answer_lens), max(answer_lens)
    length = max(p + n for p, n in zip(prompt_lens, answer_lens, strict=True))
    answer_mask = torch.zeros(b, a, dtype=torch.bool)
    key_mask = torch.zeros(b, length, dtype=torch.bool)
    for i, (p, n) in enumerate(zip(prompt_lens, answer_lens, strict=True)):
        answer_mask[i, :n] = True
        key_mask[i, length - p - n :] = True  # left padding

    def field(lo=0.0, hi=1.0):
        x = lo + (hi - lo) * torch.rand(b, nl, h, a, generator=g)
        return x.masked_fill(~answer_mask[:, None, None, :], float("nan"))

    rows = RowStats(field(), field(), field(), field(), field())
    sinks = field()[..., None]
    lookups = LookupStats(field(-5.0, 0.0), field(), sinks)
    col = torch.rand(b, nl, h, length, generator=g)
    col = col.masked_fill(~key_mask[:, None, None, :], 1e6)  # poison: padded keys must never be picked
    columns = ColumnStats(col * 3.0, col)
    logits = torch.rand(b, a, len(LOGIT_NAMES), generator=g).masked_fill(
        ~answer_mask[..., None], float("nan")
    )
    hidden = torch.randn(b, nh, a, dm, generator=g).masked_fill(~answer_mask[:, None, :, None], float("nan"))
    return ForwardStats(
        layers=tuple(range(nl)),
        answer_mask=answer_mask,
        answer_len=torch.tensor(answer_lens),
        prompt_len=torch.tensor(prompt_lens),
        key_mask=key_mask,
        rows=rows,
        lookups=lookups,
        columns=columns,
        logit_stats=logits,
        logit_stat_names=LOGIT_NAMES,
        hidden_layers=(1,),
        hidden=hidden,
    )


N_LOGIT = len(LOGIT_STAT_NAMES)


def make_record(rid, rng, nl=2, h=4, a=5, v=N_LOGIT, dm=6, mtopdiv=False):
    """A random record of the right shapes."""
    return ExampleRecord(
        id=rid,
        answer_len=a,
        prompt_len=7,
        head_stats=rng.normal(size=(nl, h, len(HEAD_STATS), 4)).astype(np.float32),
        sink_topk=np.sort(rng.random((nl, h, MAX_SINKS)), -1)[..., ::-1].astype(np.float32),
        token_prev=rng.random((nl, h, a)).astype(np.float32),
        logit_pooled=rng.normal(size=(v, 4)).astype(np.float32),
        token_logit=rng.random((a, v)).astype(np.float32),
        hidden_pooled=rng.normal(size=(1, 2, dm)).astype(np.float32),
        mtopdiv=(rng.random((nl, h)).astype(np.float32) if mtopdiv else np.zeros((0, 0), np.float32)),
    )


@pytest.fixture
def forward_stats():
    return synth_forward()


@pytest.fixture
def record_factory():
    return make_record


@pytest.fixture
def forward_factory():
    return synth_forward


@pytest.fixture(scope="module")
def char_llama():
    """A random 2-layer Llama (4 query / 2 KV heads, vocab 128: one id per ASCII character), "attnstats"."""
    from flashstats_hf import ATTN_IMPLEMENTATION
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=48, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=2,
    )  # fmt: skip
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    return LlamaForCausalLM(cfg).eval()


class CharTokenizer:
    """One token per ASCII character (the vocabulary of ``char_llama``)."""

    pad_token_id = 0

    def decode(self, ids, *, clean_up_tokenization_spaces):
        # required: Transformers' BPE tokenizers warn on every decode that leaves it at its default True
        assert clean_up_tokenization_spaces is False
        return "".join(chr(i) for i in ids)


def _char_extractor_class():
    from halluprobe.features import ProxyExtractor

    class CharExtractor(ProxyExtractor):
        """A ProxyExtractor that encodes ``[BOS] context question answer`` one character per token."""

        def encode(self, ex):
            prompt = [1] + [ord(c) for c in f"{ex.context} {ex.question} "]
            ids = prompt + [ord(c) for c in ex.answer]
            self.check_length(len(ids), f"example {ex.id!r}")  # the rule of ProxyExtractor.encode
            self._lengths[ex.id] = len(ids)
            return ids, len(prompt)

        def encode_bare(self, ex):
            return [1] + [ord(c) for c in f" {ex.question} "]

    return CharExtractor


@pytest.fixture(scope="session")
def char_extractor():
    """``char_extractor(model, layers=None, hidden_layers=...)``: a character-level ProxyExtractor."""
    cls = _char_extractor_class()
    return lambda model, *args, **kwargs: cls(model, CharTokenizer(), *args, **kwargs)


@pytest.fixture
def char_proxy(char_llama, monkeypatch):
    """Every CLI command runs on ``char_llama`` with character tokens instead of loading SmolLM2.

    Patches the proxy loader (``flashstats_hf.load_model``) and the ``ProxyExtractor`` of
    ``halluprobe.features._extract``, which `halluprobe.cli` and `halluprobe.Detector` look up when they run.
    """
    import flashstats_hf
    import halluprobe.features._extract

    def load_model(proxy=None, device=None):
        return char_llama, CharTokenizer()

    monkeypatch.setattr(flashstats_hf, "load_model", load_model)
    monkeypatch.setattr(halluprobe.features._extract, "ProxyExtractor", _char_extractor_class())
    return char_llama
