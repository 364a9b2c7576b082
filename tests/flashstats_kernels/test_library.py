"""torch.library registration: fake shapes, no graph breaks under torch.compile, CUDA graphs, gradients."""

import flashstats_kernels as fk
import pytest
import torch
from flashstats_kernels import _library
from torch._subclasses.fake_tensor import FakeTensorMode

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"  # the CPU runs the kernels under Triton's interpreter (conftest)


def inputs(b=2, hq=4, hkv=2, seq=40, r=8, d=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, r, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(b, hkv, seq, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(b, hkv, seq, d, generator=g).to(DEVICE, dtype)
    mask = torch.ones(b, seq, dtype=torch.bool)
    mask[b - 1, :3] = False  # the last element is left-padded
    prompt_len = torch.tensor([seq - r, seq - r - 5][:b])
    sinks = torch.tensor([[0, 1], [3, 4]][:b])
    return q, k, v, mask.to(DEVICE), prompt_len.to(DEVICE), sinks.to(DEVICE)


def full_call(q, k, v, mask, prompt_len, sinks, backend="triton"):
    request = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    return fk.response_attention(
        q,
        k,
        v,
        request=request,
        key_mask=mask,
        prompt_len=prompt_len,
        window=24,
        softcap=20.0,
        backend=backend,
    )


def flat(res: fk.AttentionResult) -> list[torch.Tensor]:
    rows, lk, col = res.rows, res.lookups, res.columns
    assert rows is not None and lk is not None and col is not None
    return [res.out, res.lse, *vars(rows).values(), *vars(lk).values(), *vars(col).values()]


@pytest.mark.parametrize("rows", [True, False])
def test_opcheck_forward(rows):
    q, k, v, mask, plen, _ = inputs()
    args = (q, k, v, mask, plen, 0.25, None, None, rows)
    torch.library.opcheck(
        _library.forward_op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor")
    )


def test_opcheck_lookups_and_columns():
    q, k, v, mask, plen, sinks = inputs()
    lse = fk.response_attention(q, k, v, key_mask=mask, prompt_len=plen, backend="triton").lse
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(
        _library.lookups_op, (q, k, lse, sinks, mask, plen, 0.25, 5.0, 9, 1e-30), test_utils=utils
    )
    torch.library.opcheck(_library.columns_op, (q, k, lse, None, plen, 0.25, None, None), test_utils=utils)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fake_implementation_gives_every_shape_and_dtype(dtype):
    q, k, v, mask, _, sinks = inputs(dtype=dtype)  # an int prompt length: a CPU tensor's values are checked
    real = flat(full_call(q, k, v, mask, 30, sinks))
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fq, fk_, fv, fmask, fsinks = (mode.from_tensor(x) for x in (q, k, v, mask, sinks))
        fake = flat(full_call(fq, fk_, fv, fmask, 30, fsinks))
    assert [(t.shape, t.dtype, t.stride()) for t in fake] == [(t.shape, t.dtype, t.stride()) for t in real]
    b, hq, r, d, seq, s = 2, 4, 8, 16, 40, 2
    expected = [(b, hq, r, d), (b, hq, r)] + [(b, hq, r)] * 7 + [(b, hq, r, s), (b, hq, seq), (b, hq, seq)]
    assert [tuple(t.shape) for t in real] == expected
    assert real[0].dtype == dtype and all(t.dtype == torch.float32 for t in real[1:])


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_public_api_is_one_graph(backend):
    explain = torch._dynamo.explain(full_call)(*inputs(), backend=backend)
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons


def test_post_passes_are_one_graph():
    q, k, v, mask, plen, sinks = inputs()
    lse = fk.response_attention(q, k, v, key_mask=mask, prompt_len=plen, backend="triton").lse

    def post(q, k, lse, mask, plen, sinks):
        lk = fk.response_lookups(
            q, k, lse, sink_positions=sinks, key_mask=mask, prompt_len=plen, backend="triton"
        )
        col = fk.response_columns(q, k, lse, key_mask=mask, prompt_len=plen, backend="triton")
        return lk.sink_weights, col.mean

    explain = torch._dynamo.explain(post)(q, k, lse, mask, plen, sinks)
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons


def test_fullgraph_compile_matches_eager():
    args = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(full_call, fullgraph=True, backend="aot_eager")
    for got, want in zip(flat(compiled(*args)), flat(full_call(*args)), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="the GPU test compiles with Inductor on CUDA")
def test_inductor_compiles_on_the_cpu():
    """Inductor (C++ code generation on the CPU) around the opaque ops, fullgraph, same numbers."""
    q, k, v, mask, plen, sinks = inputs(b=1, hq=2, hkv=1, seq=24, r=4)

    def f(q, k, v):
        res = fk.response_attention(q * 0.5, k, v, request=fk.StatsRequest(rows=True), backend="triton")
        assert res.rows is not None
        return res.out.float().sum(-1) + res.rows.entropy

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v))


def test_gradient_through_triton_raises_a_clear_error():
    q, k, v, mask, plen, _ = inputs()
    q.requires_grad_()
    res = fk.response_attention(q, k, v, key_mask=mask, prompt_len=plen, backend="triton")  # forward is fine
    with pytest.raises(NotImplementedError, match="compute no gradients.*backend='torch'"):
        res.out.sum().backward()


def test_gradient_through_the_torch_backend_flows():
    q, k, v, mask, plen, _ = inputs()
    q.requires_grad_()
    fk.response_attention(q, k, v, key_mask=mask, prompt_len=plen, backend="torch").out.sum().backward()
    assert q.grad is not None and bool(q.grad.abs().sum() > 0)
