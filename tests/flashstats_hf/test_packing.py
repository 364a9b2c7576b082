"""Packed recorded forwards: the same statistics as the left-padded batch, without padding or masks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from flashstats_hf import record_forward
from flashstats_kernels import StatsRequest
from transformers import masking_utils

REQUEST = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0, 2))
CASES = {  # kind, total lengths, answer lengths
    "qwen3-B3": ("qwen3", [14, 4, 9], [8, 2, 1]),
    "llama-B2": ("llama", [12, 7], [2, 5]),
    "gemma2-softcap-window-B3": ("gemma2", [10, 13, 5], [4, 2, 4]),
    "qwen3sliding-B2": ("qwen3_sliding", [13, 8], [6, 3]),
    "gemma3-B2": ("gemma3", [12, 6], [5, 2]),
}


def _fields(fs) -> dict[str, torch.Tensor]:
    named = {"logit_stats": fs.logit_stats, "hidden": fs.hidden}
    if fs.column_topk is not None:  # reduced columns (the default): values only, ties may order apart
        named["column_topk.values"] = fs.column_topk.values
    for part in (fs.rows, fs.lookups, fs.columns):
        if part is None:
            continue
        named.update(
            {f"{type(part).__name__}.{f.name}": getattr(part, f.name) for f in dataclasses.fields(part)}
        )
    return named


def _both(helpers, kind, lengths, answers, dtype=torch.float64, **kw):
    model, _ = helpers.tiny_models(kind)
    model.to(dtype)
    ids, mask, start = helpers.padded_batch(lengths, answers)
    args = dict(response_start=start, attention_mask=mask, request=REQUEST, hidden_layers=[0, 1, -1], **kw)
    return record_forward(model, ids, pack=True, **args), record_forward(model, ids, pack=False, **args)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_packed_equals_padded(helpers, case):
    packed, padded = _both(helpers, *CASES[case])
    assert packed.layers == padded.layers
    for name in ("answer_mask", "answer_len", "prompt_len", "key_mask", "response_start"):
        assert torch.equal(getattr(packed, name), getattr(padded, name)), name
    want = _fields(padded)
    for name, have in _fields(packed).items():
        assert have.shape == want[name].shape, name
        torch.testing.assert_close(have, want[name], atol=2e-6, rtol=2e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("layers", [[1], [0, 2]])
def test_packed_equals_padded_on_a_subset_of_layers(helpers, layers):
    """Unscored layers of a packed forward attend within examples too (their output feeds the scored ones)."""
    packed, padded = _both(helpers, "qwen3", [14, 4, 9], [8, 2, 1], layers=layers)
    assert packed.layers == padded.layers == tuple(layers)
    want = _fields(padded)
    for name, have in _fields(packed).items():
        torch.testing.assert_close(have, want[name], atol=2e-6, rtol=2e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.slow  # the whole model on the interpreted varlen kernels
def test_packed_forward_builds_no_mask_and_calls_no_sdpa(helpers, monkeypatch):
    """With the Triton backend every layer runs the varlen kernels: no padded mask, no dense mask, no SDPA."""
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU runs the kernels interpreted
    model, _ = helpers.tiny_models("gemma2", device)
    ids, mask, start = helpers.padded_batch([9, 5], [3, 2], device=device)
    args = dict(response_start=start, attention_mask=mask, request=REQUEST, hidden_layers=[1])
    padded = record_forward(model, ids, pack=False, **args)

    def refuse(*a, **k):
        raise AssertionError("a dense mask or SDPA call in a packed forward")

    monkeypatch.setattr(masking_utils, "sdpa_mask", refuse)
    monkeypatch.setattr(F, "scaled_dot_product_attention", refuse)
    monkeypatch.setattr("flashstats_hf._sdpa.visibility", refuse)
    packed = record_forward(model, ids, pack=True, backend="triton", **args)
    want = _fields(padded)
    for name, have in _fields(packed).items():
        torch.testing.assert_close(have, want[name], atol=2e-4, rtol=2e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_pack_defaults_and_errors(helpers):
    model, _ = helpers.tiny_models("llama")
    ids, mask, start = helpers.padded_batch([9, 12], [3, 4])
    with pytest.raises(TypeError, match="pack must be"):
        record_forward(model, ids, response_start=start, attention_mask=mask, pack="yes")
    alone = record_forward(model, ids[1:], response_start=start[1:] - 0, pack=True)
    plain = record_forward(model, ids[1:], response_start=start[1:])
    torch.testing.assert_close(alone.rows.entropy, plain.rows.entropy, atol=2e-5, rtol=2e-5)


@pytest.mark.gpu
def test_packed_equals_padded_on_cuda(helpers):
    """On CUDA the packed forward runs the varlen Triton kernels (Base rows included) in fp32."""
    model, _ = helpers.tiny_models("gemma2", "cuda")
    ids, mask, start = helpers.padded_batch([10, 13, 5], [4, 2, 4], device="cuda")
    args = dict(response_start=start, attention_mask=mask, request=REQUEST, hidden_layers=[0, 1, -1])
    packed, padded = (
        record_forward(model, ids, pack=True, **args),
        record_forward(model, ids, pack=False, **args),
    )
    want = _fields(padded)
    for name, have in _fields(packed).items():
        torch.testing.assert_close(have, want[name], atol=3e-3, rtol=3e-3, msg=lambda m, n=name: f"{n}: {m}")
