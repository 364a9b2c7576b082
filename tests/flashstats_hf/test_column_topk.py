"""Columns reduced inside each layer (the default) against the full column vectors of the same forward."""

from __future__ import annotations

import pytest
import torch
from flashstats_hf import COLUMN_TOPK, column_topk, record_forward
from flashstats_hf.graphs import BucketInputs, bucket_plan, recorded_forward, shape_plan
from flashstats_kernels import StatsRequest

REQUEST = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,))
# kind, total lengths, answer lengths (left padding), pack
CASES = {
    "qwen3-B1-L23-A6": ("qwen3", [23], [6], None),
    "qwen3-B3-L21-A8-padded": ("qwen3", [21, 9, 17], [8, 2, 5], False),
    "qwen3-B3-L21-A8-packed": ("qwen3", [21, 9, 17], [8, 2, 5], True),
    "gemma2-softcap-B2-L19-A4": ("gemma2", [19, 12], [4, 3], False),
    "qwen3-B2-L9-A3-fewer-keys-than-k": ("qwen3", [9, 5], [3, 2], False),
}


def _topk_of_full(mean: torch.Tensor, keep: torch.Tensor, k: int):
    """``[B, NL, Hq, k]`` values and counts of real keys, from the full means (the old reduction)."""
    out = torch.zeros(*mean.shape[:3], k)
    for b in range(mean.shape[0]):
        vals = mean[b][..., keep[b]]
        n = min(k, vals.shape[-1])
        out[b, ..., :n] = vals.topk(n, dim=-1).values
    return out


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_reduced_columns_equal_the_topk_of_the_full_ones(helpers, case):
    kind, lengths, answers, pack = CASES[case]
    model, _ = helpers.tiny_models(kind)
    ids, mask, start = helpers.padded_batch(lengths, answers)
    mask = mask if len(set(lengths)) > 1 else None
    kw = dict(response_start=start, attention_mask=mask, request=REQUEST, pack=pack, hidden_layers=[1])
    reduced = record_forward(model, ids, **kw)
    full = record_forward(model, ids, full_columns=True, **kw)
    assert reduced.columns is None and full.column_topk is None
    top = reduced.column_topk
    b, nl, hq, length = full.columns.mean.shape
    assert top.values.shape == top.index.shape == (b, nl, hq, COLUMN_TOPK)
    assert top.values.dtype == torch.float32 and top.index.dtype == torch.int64
    keep = full.key_mask
    torch.testing.assert_close(
        top.values, _topk_of_full(full.columns.mean, keep, COLUMN_TOPK), rtol=0, atol=0
    )
    # every index points at a real key holding that mean; -1 (value 0) only past the example's real keys
    real = top.index >= 0
    assert torch.equal(real.sum(-1), keep.sum(-1).clamp(max=COLUMN_TOPK)[:, None, None].expand(b, nl, hq))
    at = full.columns.mean.gather(-1, top.index.clamp(min=0))
    assert torch.equal(torch.where(real, at, 0.0), top.values)
    assert bool(keep.gather(1, top.index.clamp(min=0).flatten(1))[real.flatten(1)].all())
    assert bool((top.values[~real] == 0).all())
    # what is not columns is untouched
    for name in ("entropy", "prompt_mass", "effective_support"):
        assert torch.equal(getattr(reduced.rows, name), getattr(full.rows, name))
    assert torch.equal(reduced.lookups.sink_weights, full.lookups.sink_weights)
    assert torch.equal(reduced.hidden, full.hidden)


def test_column_topk_sets_k_and_checks_its_arguments(helpers):
    model, _ = helpers.tiny_models("qwen3")
    ids, _, start = helpers.padded_batch([30], [7])
    fs = record_forward(model, ids, response_start=start, request=REQUEST, column_topk=3, logits=False)
    assert fs.column_topk.values.shape[-1] == 3
    assert bool((fs.column_topk.values[..., :-1] >= fs.column_topk.values[..., 1:]).all())  # descending
    for bad in (0, -2, True, 2.5):
        with pytest.raises(ValueError, match="column_topk"):
            record_forward(model, ids, response_start=start, column_topk=bad)
    with pytest.raises(TypeError, match="full_columns"):
        record_forward(model, ids, response_start=start, full_columns="yes")
    none = record_forward(model, ids, response_start=start, request=StatsRequest(rows=True), logits=False)
    assert none.columns is None and none.column_topk is None


def test_column_topk_masks_padding_and_pads_short_rows():
    mean = torch.tensor([[[0.1, 0.9, 0.3, 0.5]]])  # [B=1, Hq=1, L=4]
    keep = torch.tensor([[False, True, True, True]])
    got = column_topk(mean, keep, 6)
    assert torch.equal(got.values, torch.tensor([[[0.9, 0.5, 0.3, 0.0, 0.0, 0.0]]]))
    assert got.index.tolist() == [[[1, 3, 2, -1, -1, -1]]]
    every = column_topk(mean, None, 2)
    assert torch.equal(every.values, torch.tensor([[[0.9, 0.5]]])) and every.index.tolist() == [[[1, 3]]]


@pytest.mark.parametrize("bucketed", [False, True], ids=["exact-shape", "bucket-L48-R16"])
def test_captured_forward_reduces_the_same_way(helpers, bucketed):
    """What a graph captures (`recorded_forward` with a reducing plan) keeps the same top-k values."""
    model, _ = helpers.tiny_models("qwen3")
    ids, _, _ = helpers.padded_batch([29], [9])
    ref = record_forward(model, ids, response_start=20, request=REQUEST, full_columns=True, logits=False)
    sinks = torch.tensor([[0]])
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    layers = (0, 1)
    if bucketed:
        lb, rb = 48, 16
        padded = torch.cat([torch.zeros(1, lb - 29, dtype=torch.int64), ids], 1)
        inputs = BucketInputs(padded, torch.tensor([29]), torch.tensor([9]))
        plan, pos = bucket_plan(layers, request, inputs, rb)
    else:
        padded, plan, pos = ids, shape_plan(layers, request, 29, 9, ids.device), None
    plan = type(plan)(**{**plan.__dict__, "column_topk": COLUMN_TOPK})
    out = recorded_forward(model, padded, plan, layers, position_ids=pos)
    assert out[2] is None
    top = out[-1]
    want = _topk_of_full(ref.columns.mean, ref.key_mask, COLUMN_TOPK)[:, : len(layers)]
    torch.testing.assert_close(top.values, want, atol=1e-6, rtol=1e-5)
    shift = padded.shape[1] - 29
    index = torch.where(top.index >= 0, top.index - shift, -1)
    assert bool((index[top.index >= 0] >= 0).all())
