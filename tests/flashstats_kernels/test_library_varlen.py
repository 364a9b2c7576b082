"""Packed (varlen) launches through the torch.library ops: opcheck, fake layouts, one graph, compile."""

import dataclasses

import flashstats_kernels as fk
import pytest
import torch
from flashstats_kernels import _library
from flashstats_kernels.varlen import check_varlen

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"  # the CPU runs the kernels under Triton's interpreter (conftest)
UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


def packed(seqs=((3, 7), (0, 4), (5, 9)), hq=4, hkv=2, d=16, gaps=False, seed=0, dtype=torch.float32):
    """Inputs of a packed call: q [TQ, Hq, D], k and v [TK, Hkv, D], offsets, a key mask, sinks [N, S]."""
    g = torch.Generator().manual_seed(seed)
    extra = 2 if gaps else 0  # unused rows and keys after every sequence (seqused_q / seqused_k)
    cu_q = torch.tensor([0] + [r + extra for r, _ in seqs]).cumsum(0)
    cu_k = torch.tensor([0] + [n + extra for _, n in seqs]).cumsum(0)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    q = torch.randn(tq, hq, d, generator=g).to(DEVICE, dtype)
    k, v = (torch.randn(tk, hkv, d, generator=g).to(DEVICE, dtype) for _ in range(2))
    mask = torch.ones(tk, dtype=torch.bool)
    mask[1] = False
    kwargs = {"key_mask": mask.to(DEVICE), "softcap": 20.0, "window": 6}
    if gaps:
        kwargs["seqused_q"] = torch.tensor([r for r, _ in seqs])
        kwargs["seqused_k"] = torch.tensor([n for _, n in seqs])
    sinks = torch.tensor([[0, 2], [1, 3], [4, 0]][: len(seqs)])
    bounds = (max(r for r, _ in seqs), max(n for _, n in seqs))
    return (q, k, v, cu_q, cu_k, *bounds), kwargs, sinks


def call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, **kwargs):
    request = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    return fk.response_attention_varlen(
        q, k, v, cu_q, cu_k, max_q, max_k, request=request, backend="triton", **kwargs
    )


def flat(res: fk.AttentionResult) -> list[torch.Tensor]:
    parts = (res.rows, res.lookups, res.columns)
    return [res.out, res.lse] + [getattr(x, f.name) for x in parts for f in dataclasses.fields(x)]


def op_args(gaps):
    """The ops' arguments of a packed launch, as `_library`'s wrappers pass them."""
    (q, k, v, cu_q, cu_k, max_q, max_k), kwargs, sinks = packed(gaps=gaps)
    problem, varlen = check_varlen(
        q, k, v, cu_q, cu_k, max_q, max_k, prompt_len=None, scale=None,
        **{"seqused_q": None, "seqused_k": None, **kwargs},
    )  # fmt: skip
    q4, k4, v4 = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))
    options = (problem.key_mask, problem.prompt_len, problem.scale, problem.softcap, problem.window)
    return (q4, k4, v4), options, _library._varlen_args(varlen), sinks.to(DEVICE)


@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("rows", [True, False])
def test_opcheck_packed_forward(rows, gaps):
    (q4, k4, v4), options, var, _ = op_args(gaps)
    torch.library.opcheck(_library.forward_op, (q4, k4, v4, *options, rows, *var), test_utils=UTILS)


@pytest.mark.parametrize("gaps", [False, True])
def test_opcheck_packed_lookups_and_columns(gaps):
    (q4, k4, v4), options, var, sinks = op_args(gaps)
    _, lse, _ = _library.forward_op(q4, k4, v4, *options, False, *var)
    mask, plen, *rest = options
    torch.library.opcheck(
        _library.lookups_op, (q4, k4, lse, sinks, mask, plen, *rest, 1e-30, *var), test_utils=UTILS
    )
    torch.library.opcheck(_library.columns_op, (q4, k4, lse, *options, *var), test_utils=UTILS)


@pytest.mark.parametrize("gaps", [False, True])
def test_packed_layouts(gaps):
    """The layouts the fakes must give (opcheck compares fake and real): ``out`` token-major."""
    (q, k, v, cu_q, cu_k, max_q, max_k), kwargs, sinks = packed(gaps=gaps)
    real = flat(call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, **kwargs))
    tq, tk, hq, d = q.shape[0], k.shape[0], 4, 16
    assert real[0].shape == (tq, hq, d) and real[0].stride() == (hq * d, d, 1)  # FlashAttention's layout
    assert [tuple(t.shape) for t in real[1:]] == [(hq, tq)] * 8 + [(hq, tq, 2), (hq, tk), (hq, tk)]
    assert all(t.dtype == torch.float32 for t in real[1:]) and real[0].dtype == q.dtype


@pytest.mark.parametrize("gaps", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_packed_call_is_one_graph_and_compiles_fullgraph(gaps):
    (q, k, v, cu_q, cu_k, max_q, max_k), kwargs, sinks = packed(gaps=gaps)
    args = (q, k, v, cu_q, cu_k, max_q, max_k, sinks)

    def f(q, k, v, cu_q, cu_k, max_q, max_k, sinks):
        return flat(call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, **kwargs))

    explain = torch._dynamo.explain(f)(*args)
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(*args), f(*args), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)


def test_packed_gradient_raises_the_named_error():
    (q, k, v, cu_q, cu_k, max_q, max_k), kwargs, _ = packed()
    q.requires_grad_()
    res = fk.response_attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, backend="triton", **kwargs)
    with pytest.raises(NotImplementedError, match="compute no gradients.*backend='torch'"):
        res.out.sum().backward()


@pytest.mark.gpu
def test_packed_call_compiles_with_inductor_and_replays_from_a_cuda_graph():
    """Offsets, seqused and sink positions on the device: no host read, so a CUDA graph captures it."""
    seqs = ((100, 700), (0, 30), (200, 1000))

    def make(seed):
        (q, k, v, cu_q, cu_k, max_q, max_k), kwargs, sinks = packed(
            seqs, 8, 2, 64, True, seed, torch.bfloat16
        )
        dev = {name: x.cuda() for name, x in kwargs.items() if isinstance(x, torch.Tensor)}
        return (q, k, v, cu_q.cuda(), cu_k.cuda(), max_q, max_k, sinks.cuda()), {**kwargs, **dev}

    args, kwargs = make(0)

    def f(q, k, v, cu_q, cu_k, max_q, max_k, sinks):
        return flat(call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, **kwargs))

    def same(got, want):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, atol=0, rtol=0, equal_nan=True)

    torch._dynamo.reset()
    explain = torch._dynamo.explain(f)(*args)
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    compiled = torch.compile(f, fullgraph=True)  # Inductor
    for seed in (0, 1):
        same(compiled(*make(seed)[0]), f(*make(seed)[0]))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        f(*args)  # warm-up: autotuning and compilation outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = f(*args)
    new = make(2)[0]
    for dst, src in zip(args[:3], new[:3], strict=True):
        dst.copy_(src)
    args[-1].copy_(torch.tensor([[5, 699], [1, 2], [0, 999]], device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    same(outs, f(*args))
