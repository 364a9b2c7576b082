"""CUDA-graph-captured recorded forwards (flashstats_hf.graphs) against record_forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, record_forward
from flashstats_hf.graphs import POOL_NAMES, GraphedRecorder
from transformers import Qwen3Config, Qwen3ForCausalLM


def _tiny(device: str, dtype: torch.dtype | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=101,
        hidden_size=128,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        head_dim=64,
        initializer_range=0.3,
    )
    if dtype is None:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype)
    model.eval()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def _tiny_llama(dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101, hidden_size=192, intermediate_size=96, num_attention_heads=3,
        num_key_value_heads=1, num_hidden_layers=2, initializer_range=0.3,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=dtype).eval()
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model


def test_cpu_model_is_refused():
    with pytest.raises(ValueError, match="CUDA"):
        GraphedRecorder(_tiny("cpu"))


def _fields(stats):
    return {} if stats is None else {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


def _poison_free_memory() -> list[torch.Tensor]:
    """Refills freed blocks of the caching allocator with out-of-range integers.

    A graph that read a tensor freed after its capture (the first GPU run's gather indices) then
    fails at once instead of by chance.
    """
    return [
        torch.full((n,), 2**40, dtype=torch.int64, device="cuda") for n in (1, 8, 64, 200) for _ in range(64)
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_replays_match_record_forward(arch):
    model = _tiny("cuda") if arch == "qwen3" else _tiny_llama()
    rec = GraphedRecorder(model)
    for seed in (1, 2, 3):  # the first call captures, the later ones replay with new tokens
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 101, (1, 200), generator=gen).cuda()
        junk = _poison_free_memory()
        got = rec(ids, response_start=130)
        del junk
        ref = record_forward(model, ids, response_start=130, logits=False, backend="triton")
        assert got.layers == ref.layers
        for fam in ("rows", "lookups", "columns", "column_topk"):
            for name, want in _fields(getattr(ref, fam)).items():
                if name == "index":  # key positions of near-equal column means may swap; values must not
                    continue
                have = _fields(getattr(got, fam))[name]
                assert have.shape == want.shape, (fam, name)
                torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5, msg=f"{fam}.{name} seed {seed}")


@pytest.mark.gpu
def test_pooled_mode_reduces_over_answer_tokens():
    model = _tiny("cuda")
    rec = GraphedRecorder(model, pooled=True)
    ids = torch.randint(0, 101, (1, 180), generator=torch.Generator().manual_seed(4)).cuda()
    for _ in range(2):
        got = rec(ids, response_start=100)
    ref = record_forward(model, ids, response_start=100, logits=False, backend="triton")
    ent = ref.rows.entropy.double()  # [1, NL, Hq, A]
    want = torch.stack([ent.mean(-1), ent.std(-1, correction=0), ent.amin(-1), ent.amax(-1)], -1)
    assert got.rows.entropy.shape == (1, 3, 4, len(POOL_NAMES))
    torch.testing.assert_close(got.rows.entropy.double(), want, atol=1e-5, rtol=1e-5)
    sinks = ref.lookups.sink_weights.double()  # [1, NL, Hq, A, S]
    torch.testing.assert_close(got.lookups.sink_weights[..., 3].double(), sinks.amax(3), atol=1e-6, rtol=1e-6)


def _capturing(monkeypatch):
    """Makes Transformers' mask builder behave as while a CUDA graph is being captured."""
    from transformers import masking_utils

    monkeypatch.setattr(masking_utils, "is_tracing", lambda *a, **k: True)


@pytest.mark.parametrize("pooled", [False, True])
def test_captured_body_scores_every_layer_as_record_forward(monkeypatch, pooled):
    """What a capture records (run eagerly on the CPU, with Transformers believing it is capturing)."""
    from flashstats_hf.graphs import recorded_forward, shape_plan
    from flashstats_hf.record import DEFAULT_REQUEST

    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 40), generator=torch.Generator().manual_seed(5))
    ref = record_forward(model, ids, response_start=27, logits=False, backend="torch")
    _capturing(monkeypatch)
    request = dataclasses.replace(
        DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    )
    plan = shape_plan((0, 1, 2), request, 40, 13, torch.device("cpu"), backend="torch")
    rows, lookups, columns, *_ = recorded_forward(model, ids, plan, (0, 1, 2), pooled=pooled)
    if pooled:
        ent = ref.rows.entropy.double()
        want = torch.stack([ent.mean(-1), ent.std(-1, correction=0), ent.amin(-1), ent.amax(-1)], -1)
        torch.testing.assert_close(rows.entropy.double(), want, atol=1e-6, rtol=1e-6)
        return
    for fam, got in (("rows", rows), ("lookups", lookups), ("columns", columns)):
        for name, want in _fields(getattr(ref, fam)).items():
            torch.testing.assert_close(_fields(got)[name], want, atol=1e-6, rtol=1e-6, msg=f"{fam}.{name}")


def test_capture_without_the_packing_patch_would_leave_layers_unscored(monkeypatch):
    """The failure `unpacked_positions` prevents: a dense packed-sequence mask while capturing."""
    from flashstats_hf._recorder import Recorder
    from flashstats_hf.graphs import shape_plan
    from flashstats_hf.record import DEFAULT_REQUEST

    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 30), generator=torch.Generator().manual_seed(6))
    _capturing(monkeypatch)
    request = dataclasses.replace(
        DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    )
    plan = shape_plan((0, 1, 2), request, 30, 10, torch.device("cpu"), backend="torch")
    with pytest.warns(UserWarning, match="runs unscored"), torch.no_grad(), Recorder(plan) as rec:
        model.model(input_ids=ids, use_cache=False)
    assert rec.results == {}


def _bucket_run(model, ids, start, lb, rb, pooled, **extra):
    from flashstats_hf.graphs import BucketInputs, bucket_plan, recorded_forward
    from flashstats_hf.record import DEFAULT_REQUEST

    length = ids.shape[1]
    padded = torch.zeros(1, lb, dtype=torch.int64)
    padded[:, lb - length :] = ids
    inputs = BucketInputs(ids=padded, length=torch.tensor([length]), rows=torch.tensor([length - start]))
    request = dataclasses.replace(
        DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
    )
    plan, position_ids = bucket_plan((0, 1, 2), request, inputs, rb, backend="torch")
    out = recorded_forward(model, padded, plan, (0, 1, 2), pooled=pooled, position_ids=position_ids, **extra)
    return out if extra else out[:3]


@pytest.mark.parametrize(
    ("length", "start", "lb", "rb"), [(40, 27, 64, 16), (33, 5, 48, 32), (20, 19, 24, 8)]
)
def test_bucketed_body_matches_the_unpadded_example(monkeypatch, length, start, lb, rb):
    """One graph per bucket: left padding and spare answer slots change nothing on the real tokens."""
    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, length), generator=torch.Generator().manual_seed(length))
    ref = record_forward(model, ids, response_start=start, logits=False, backend="torch", full_columns=True)
    _capturing(monkeypatch)
    rows, lookups, columns = _bucket_run(model, ids, start, lb, rb, pooled=False)
    r = length - start
    got = {
        "rows": {k: v[..., :r] for k, v in _fields(rows).items()},
        "lookups": {
            "diag_log": lookups.diag_log[..., :r],
            "prev_weight": lookups.prev_weight[..., :r],
            "sink_weights": lookups.sink_weights[..., :r, :],
        },
        "columns": {k: v[..., lb - length :] for k, v in _fields(columns).items()},
    }
    for fam in ("rows", "lookups", "columns"):
        for name, want in _fields(getattr(ref, fam)).items():
            torch.testing.assert_close(got[fam][name], want, atol=1e-5, rtol=1e-5, msg=f"{fam}.{name}")
    assert torch.all(rows.entropy[..., r:] == 0)  # spare answer slots are zero, as for padded batches


def test_bucketed_pooling_leaves_out_spare_slots_and_padding(monkeypatch):
    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 30), generator=torch.Generator().manual_seed(8))
    ref = record_forward(model, ids, response_start=21, logits=False, backend="torch", full_columns=True)
    _capturing(monkeypatch)
    rows, lookups, columns = _bucket_run(model, ids, 21, 48, 16, pooled=True)

    def pool(x):  # x [..., N] over the last axis
        x = x.double()
        return torch.stack([x.mean(-1), x.std(-1, correction=0), x.amin(-1), x.amax(-1)], -1)

    torch.testing.assert_close(rows.max_weight.double(), pool(ref.rows.max_weight), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lookups.diag_log.double(), pool(ref.lookups.diag_log), atol=1e-4, rtol=1e-5)
    sinks = ref.lookups.sink_weights.transpose(-1, -2)  # [1, NL, Hq, S, A]
    torch.testing.assert_close(lookups.sink_weights.double(), pool(sinks), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(columns.mean.double(), pool(ref.columns.mean), atol=1e-5, rtol=1e-5)


def test_bucket_shapes_and_bad_buckets():
    from flashstats_hf.graphs import bucket_shape

    assert bucket_shape(1000, 300, None) == (1000, 300)
    assert bucket_shape(1000, 300, (256, 64)) == (1024, 320)
    assert bucket_shape(1024, 320, (256, 64)) == (1024, 320)
    assert bucket_shape(100, 99, (64, 64)) == (192, 128)  # R_b = 128 needs L_b > 128
    model = _tiny("cpu")
    for bad in ((256,), (0, 64), (256.0, 64), [256, 64]):
        with pytest.raises(ValueError, match="buckets"):
            GraphedRecorder(model, buckets=bad)


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_one_bucketed_graph_serves_examples_of_different_lengths(arch):
    # fp32: the prompt rows of a bucket run masked SDPA, whose rounding differs from the unpadded
    # forward's; in bf16 that difference would reach the later layers' statistics
    model = _tiny("cuda", torch.float32) if arch == "qwen3" else _tiny_llama(torch.float32)
    rec = GraphedRecorder(model, buckets=(64, 32))
    pooled = GraphedRecorder(model, buckets=(64, 32), pooled=True)
    for length, start in ((150, 120), (131, 100), (192, 163), (140, 139)):  # all in bucket (192, 32)
        ids = torch.randint(0, 101, (1, length), generator=torch.Generator().manual_seed(length)).cuda()
        junk = _poison_free_memory()
        got = rec(ids, response_start=start)
        pool = pooled(ids, response_start=start)
        del junk
        ref = record_forward(model, ids, response_start=start, logits=False, backend="triton")
        for fam in ("rows", "lookups", "columns", "column_topk"):
            for name, want in _fields(getattr(ref, fam)).items():
                if name == "index":  # key positions of near-equal column means may swap; values must not
                    continue
                have = _fields(getattr(got, fam))[name]
                assert have.shape == want.shape, (fam, name)
                torch.testing.assert_close(have, want, atol=1e-4, rtol=1e-4, msg=f"{fam}.{name} L={length}")
        ent = ref.rows.entropy.double()
        torch.testing.assert_close(pool.rows.entropy[..., 0].double(), ent.mean(-1), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(pool.rows.entropy[..., 3].double(), ent.amax(-1), atol=1e-4, rtol=1e-4)
    assert list(rec._graphs) == [(192, 32)]


@pytest.mark.parametrize("bucketed", [False, True])
def test_captured_logits_and_hidden_states_match_record_forward(monkeypatch, bucketed):
    from flashstats_hf.graphs import recorded_forward, shape_plan
    from flashstats_hf.record import DEFAULT_REQUEST

    model = _tiny("cpu")
    ids = torch.randint(0, 101, (1, 37), generator=torch.Generator().manual_seed(9))
    ref = record_forward(model, ids, response_start=25, backend="torch", hidden_layers=(0, 2, 3))
    _capturing(monkeypatch)
    if bucketed:
        out = _bucket_run(model, ids, 25, 64, 16, False, logits=True, hidden_layers=(0, 2, 3))
    else:
        request = dataclasses.replace(
            DEFAULT_REQUEST, sink_positions=torch.tensor([list(DEFAULT_REQUEST.sink_positions)])
        )
        plan = shape_plan((0, 1, 2), request, 37, 12, torch.device("cpu"), backend="torch")
        out = recorded_forward(model, ids, plan, (0, 1, 2), logits=True, hidden_layers=(0, 2, 3))
    logit_stats, hidden = out[3], out[4]
    torch.testing.assert_close(logit_stats[:, :12], ref.logit_stats, atol=1e-5, rtol=1e-5)
    scale = ref.hidden.abs().amax().item()  # the states are O(10); padding reorders fp32 sums
    torch.testing.assert_close(hidden[:, :, :12], ref.hidden, atol=1e-5 * scale, rtol=1e-5)
    assert torch.all(logit_stats[:, 12:] == 0) and torch.all(hidden[:, :, 12:] == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("buckets", [None, (64, 32)])
def test_graphed_logits_and_hidden_states(buckets):
    model = _tiny("cuda", torch.float32)
    rec = GraphedRecorder(model, buckets=buckets, logits=True, hidden_layers=(0, -1))
    for length, start in ((150, 120), (131, 100)):
        ids = torch.randint(0, 101, (1, length), generator=torch.Generator().manual_seed(length)).cuda()
        junk = _poison_free_memory()
        got = rec(ids, response_start=start)
        del junk
        ref = record_forward(model, ids, response_start=start, backend="triton", hidden_layers=(0, -1))
        assert got.logit_stat_names == ref.logit_stat_names and got.hidden_layers == ref.hidden_layers
        torch.testing.assert_close(got.logit_stats, ref.logit_stats, atol=1e-4, rtol=1e-4)
        scale = ref.hidden.abs().amax().item()
        torch.testing.assert_close(got.hidden, ref.hidden, atol=1e-5 * scale, rtol=1e-4)


def test_pooled_mode_refuses_logits_and_hidden_states():
    for extra in ({"logits": True}, {"hidden_layers": (1,)}):
        with pytest.raises(ValueError, match="pooled=True covers attention statistics only"):
            GraphedRecorder(_tiny("cpu"), pooled=True, **extra)


def test_graph_inputs_are_checked():
    from flashstats_hf.graphs import check_graph_input

    check_graph_input(torch.zeros(1, 5, dtype=torch.int64))
    with pytest.raises(TypeError, match="integer token ids"):
        check_graph_input(torch.zeros(1, 5))
    with pytest.raises(TypeError, match="integer tensor"):
        check_graph_input([[1, 2, 3]])
    for shape in ((2, 5), (5,), (1, 1)):
        with pytest.raises(ValueError, match=r"shape \[1, L\]"):
            check_graph_input(torch.zeros(shape, dtype=torch.int64))
