"""T4 in a captured forward: GraphedRecorder(dense_heads=...) against record_forward(dense_heads=...)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, record_forward
from flashstats_hf.graphs import BucketInputs, GraphedRecorder, bucket_plan, recorded_forward, shape_plan
from flashstats_hf.record import DEFAULT_REQUEST
from transformers import Qwen3Config, Qwen3ForCausalLM

HEADS = {0: (3, 1), 2: (0,)}


def _tiny(device: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=101, hidden_size=128, intermediate_size=96, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=3, head_dim=32, initializer_range=0.3,
    )  # fmt: skip
    model = Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def _capturing(monkeypatch):
    """Transformers' mask builder and our head indices behave as while a CUDA graph is captured."""
    from flashstats_kernels import _problem
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "is_tracing", lambda *a, **k: True)
    monkeypatch.setattr(_problem, "_capturing", lambda device: True)  # heads written by fill kernels


def _request():
    sinks = torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    return dataclasses.replace(DEFAULT_REQUEST, sink_positions=sinks)


@pytest.mark.parametrize(
    ("lb", "rb"), [(None, None), (64, 16), (48, 32)], ids=["exact", "L64-R16", "L48-R32"]
)
def test_captured_body_records_the_dense_blocks_of_record_forward(monkeypatch, lb, rb):
    """What a capture records (run eagerly on the CPU): the blocks of the chosen heads, answer-aligned."""
    model = _tiny("cpu")
    length, start = 37, 25
    ids = torch.randint(0, 101, (1, length), generator=torch.Generator().manual_seed(3))
    ref = record_forward(model, ids, response_start=start, logits=False, backend="torch", dense_heads=HEADS)
    _capturing(monkeypatch)
    if lb is None:
        plan = shape_plan((0, 1, 2), _request(), length, length - start, torch.device("cpu"), backend="torch")
        padded, position_ids, lb = ids, None, length
    else:
        padded = torch.zeros(1, lb, dtype=torch.int64)
        padded[:, lb - length :] = ids
        inputs = BucketInputs(padded, torch.tensor([length]), torch.tensor([length - start]))
        plan, position_ids = bucket_plan((0, 1, 2), _request(), inputs, rb, backend="torch")
    plan = dataclasses.replace(plan, dense_heads=HEADS)
    *_, dense, _topk = recorded_forward(model, padded, plan, (0, 1, 2), position_ids=position_ids)
    r = length - start
    assert sorted(dense) == sorted(HEADS) == sorted(ref.dense)
    for layer, heads in HEADS.items():
        block = dense[layer]  # [1, H', R_b, L_b]
        assert block.shape == (1, len(heads), plan.rows, lb)
        torch.testing.assert_close(block[:, :, :r, lb - length :], ref.dense[layer], atol=1e-5, rtol=1e-5)
        assert not block[:, :, r:].any() and not block[..., : lb - length].any()


def test_pooled_mode_refuses_dense_heads():
    with pytest.raises(ValueError, match="dense_heads=None"):
        GraphedRecorder(_tiny("cpu"), pooled=True, dense_heads=HEADS)


@pytest.mark.gpu
@pytest.mark.parametrize("buckets", [None, (64, 32)], ids=["exact", "bucketed"])
def test_graphed_dense_blocks_match_record_forward(buckets):
    model = _tiny("cuda")
    rec = GraphedRecorder(model, buckets=buckets, dense_heads=HEADS)
    for length, start in ((150, 120), (131, 100), (131, 100)):  # capture, then replays with new tokens
        ids = torch.randint(
            0, 101, (1, length), generator=torch.Generator().manual_seed(start + length)
        ).cuda()
        got = rec(ids, response_start=start)
        ref = record_forward(model, ids, response_start=start, backend="triton", dense_heads=HEADS)
        assert got.dense_heads == ref.dense_heads == HEADS
        for layer in HEADS:
            assert (
                got.dense[layer].shape
                == ref.dense[layer].shape
                == (1, len(HEADS[layer]), length - start, length)
            )
            torch.testing.assert_close(got.dense[layer], ref.dense[layer], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="not scored"):
        GraphedRecorder(model, layers=[0], dense_heads={2: (0,)})
