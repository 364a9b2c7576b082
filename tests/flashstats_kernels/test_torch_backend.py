"""The chunked PyTorch backend against the fp64 naive reference, statistic by statistic.

Tolerances per dtype are in ``conftest.TOL``: fp32 rounding for every statistic, FlashAttention's 2x rule
for ``out``.
"""

import flashstats_kernels as fk
import pytest
import torch

SHAPES = [
    dict(b=1, hq=2, hkv=1, r=1, seq=1, d=64),  # L = 1
    dict(b=2, hq=2, hkv=2, r=2, seq=2, d=64),  # R = L = 2, P = 0
    dict(b=2, hq=8, hkv=2, r=20, seq=63, d=80),  # GQA 4
    dict(b=1, hq=4, hkv=2, r=111, seq=111, d=64),  # R = L, GQA 2
    dict(b=1, hq=2, hkv=2, r=37, seq=300, d=128),  # long, MHA
    dict(b=3, hq=4, hkv=1, r=1, seq=63, d=80),  # one row (decoding-like)
]
VARIANTS = [
    dict(),
    dict(pad="left"),
    dict(pad="middle", softcap=5.0),
    dict(pad="full", window=3),
    dict(window=7, per_batch=True),
    dict(per_batch=True, pad="left", transposed=True),
    dict(prompt_len=0),
]


def cases():
    out = []
    for i, shape in enumerate(SHAPES):
        for j, variant in enumerate(VARIANTS):
            if variant.get("prompt_len") is not None and variant["prompt_len"] > shape["seq"]:
                continue
            out.append({**shape, **variant, "seed": 10 * i + j})
    return out


@pytest.mark.parametrize("spec", cases(), ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_torch_backend_matches_naive(harness, spec):
    case = harness.Case(**spec)
    inputs, kwargs, request = harness.make_case(case)
    got = fk.response_attention(*inputs, request=request, backend="torch", **kwargs)
    harness.assert_matches(got, inputs, kwargs, request)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("spec", [SHAPES[2], SHAPES[4]], ids=["L63", "L300"])
def test_torch_backend_dtypes(harness, spec, dtype):
    case = harness.Case(**spec, pad="middle", per_batch=True, dtype=dtype, seed=3)
    inputs, kwargs, request = harness.make_case(case)
    got = fk.response_attention(*inputs, request=request, backend="torch", **kwargs)
    harness.assert_matches(got, inputs, kwargs, request)


def test_small_tiles_match_one_tile(harness):
    """Tiling over rows changes nothing: forward with tile=1 equals the default tile."""
    from flashstats_kernels.ops.forward.chunked import forward_torch

    case = harness.Case(b=2, hq=4, hkv=2, r=9, seq=20, d=16, pad="middle", window=6)
    (q, k, v), kwargs, _ = harness.make_case(case)
    common = dict(
        key_mask=kwargs["key_mask"], prompt_len=torch.tensor([3, 11]), scale=0.25, softcap=None, window=6
    )
    out_a, lse_a, rows_a = forward_torch(q, k, v, rows=True, tile=1, **common)
    out_b, lse_b, rows_b = forward_torch(q, k, v, rows=True, **common)
    torch.testing.assert_close(out_a, out_b)
    torch.testing.assert_close(lse_a, lse_b)
    torch.testing.assert_close(rows_a.entropy, rows_b.entropy)


def test_standalone_post_passes_match_fused_call(harness):
    case = harness.Case(b=2, hq=4, hkv=2, r=6, seq=30, d=32, pad="left", per_batch=True, seed=5)
    inputs, kwargs, request = harness.make_case(case)
    res = fk.response_attention(*inputs, request=request, backend="torch", **kwargs)
    q, k, _ = inputs
    lookups = fk.response_lookups(
        q,
        k,
        res.lse,
        sink_positions=request.sink_positions,
        diag_eps=request.diag_eps,
        backend="torch",
        **kwargs,
    )
    columns = fk.response_columns(q, k, res.lse, backend="torch", **kwargs)
    for name in ("diag_log", "prev_weight", "sink_weights"):
        assert torch.equal(getattr(lookups, name), getattr(res.lookups, name))
    assert torch.equal(columns.sum, res.columns.sum) and torch.equal(columns.mean, res.columns.mean)


def test_no_statistics_is_plain_attention(harness):
    inputs, kwargs, _ = harness.make_case(harness.Case(b=1, hq=2, hkv=1, r=5, seq=12, d=16))
    res = fk.response_attention(*inputs, request=fk.StatsRequest(rows=False), backend="torch", **kwargs)
    assert res.rows is None and res.lookups is None and res.columns is None
    q, k, v = inputs
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
        attn_mask=torch.ones(5, 12, dtype=torch.bool).tril(diagonal=12 - 5),
    )  # fmt: skip
    torch.testing.assert_close(res.out, want, atol=1e-5, rtol=1e-5)


def test_column_sums_are_bitwise_repeatable(harness):
    case = harness.Case(b=2, hq=4, hkv=2, r=40, seq=90, d=32, pad="middle", seed=9)
    inputs, kwargs, request = harness.make_case(case)
    runs = [
        fk.response_attention(*inputs, request=request, backend="torch", **kwargs).columns for _ in range(3)
    ]
    assert all(torch.equal(r.sum, runs[0].sum) and torch.equal(r.mean, runs[0].mean) for r in runs)


def test_auto_backend_on_cpu_is_torch(harness):
    inputs, kwargs, request = harness.make_case(harness.Case(seed=4))
    a = fk.response_attention(*inputs, request=request, **kwargs)
    b = fk.response_attention(*inputs, request=request, backend="torch", **kwargs)
    for name, t in harness.flatten(a).items():
        assert torch.equal(t, harness.flatten(b)[name]), name


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize(
    "spec", [SHAPES[2], SHAPES[4], dict(b=2, hq=8, hkv=2, r=300, seq=1000, d=256)], ids=str
)
def test_public_api_on_cuda(harness, spec, backend, dtype):
    case = harness.Case(**spec, pad="left", per_batch=True, softcap=30.0, dtype=dtype, seed=11)
    inputs, kwargs, request = harness.make_case(case)
    inputs = tuple(t.cuda() for t in inputs)
    kwargs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    request = fk.StatsRequest(
        rows=True,
        lookups=True,
        columns=True,
        sink_positions=request.sink_positions.cuda(),
        diag_eps=request.diag_eps,
    )
    got = fk.response_attention(*inputs, request=request, backend=backend, **kwargs)
    assert got.out.is_cuda and got.lse.is_cuda
    harness.assert_matches(got, inputs, kwargs, request)
