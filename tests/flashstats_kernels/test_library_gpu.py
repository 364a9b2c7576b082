"""On CUDA: Inductor compiles the public API with fullgraph=True; CUDA graphs capture it with sink lookups."""

import dataclasses

import flashstats_kernels as fk
import pytest
import torch

pytestmark = pytest.mark.gpu


def make(seed, b=2, hq=8, hkv=2, seq=1000, r=200, d=64, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(b, h, n, d, generator=g).to("cuda", dtype) for h, n in ((hq, r), (hkv, seq), (hkv, seq))
    )
    mask = torch.ones(b, seq, dtype=torch.bool, device="cuda")
    mask[1, :17] = False
    plen = torch.tensor([seq - r, seq - r - 31], device="cuda")
    sinks = torch.tensor([[0, 5], [17, 18]], device="cuda")
    return q, k, v, mask, plen, sinks


def call(q, k, v, mask, plen, sinks):
    request = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    return fk.response_attention(q, k, v, request=request, key_mask=mask, prompt_len=plen)  # "auto": Triton


def flat(res):
    """Every output tensor; fields by name, since vars() of a dataclass breaks the graph when compiled."""
    parts = (res.rows, res.lookups, res.columns)
    return [res.out, res.lse] + [getattr(x, f.name) for x in parts for f in dataclasses.fields(x)]


def test_inductor_fullgraph_matches_eager():
    torch._dynamo.reset()
    args = make(0)
    explain = torch._dynamo.explain(call)(*args)
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons

    def around(q, k, v, mask, plen, sinks):  # Inductor fuses the code around the opaque ops
        res = call(q * 1.0, k, v, mask, plen, sinks)
        return *flat(res), res.out.float() * 2.0 + res.rows.entropy[..., None]

    compiled = torch.compile(around, fullgraph=True)
    for seed in (0, 1):  # new values, same shapes: no recompilation, right numbers
        got, want = compiled(*make(seed)), around(*make(seed))
        for g, w in zip(got[:-1], want[:-1], strict=True):  # the ops' own outputs: bit for bit
            torch.testing.assert_close(g, w, atol=0, rtol=0)
        torch.testing.assert_close(got[-1], want[-1])  # Inductor's fused epilogue


@pytest.mark.parametrize("sinks_as", ["tensor", "tuple"])
def test_cuda_graph_capture_with_sink_lookups(sinks_as):
    q, k, v, mask, plen, sinks = make(2)
    static_sinks = sinks if sinks_as == "tensor" else (0, 5, 999)

    def run():
        return flat(call(q, k, v, mask, plen, static_sinks))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm-up: autotuning and compilation happen outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run()
    q2, k2, v2, _, _, _ = make(3)
    for dst, src in ((q, q2), (k, k2), (v, v2)):
        dst.copy_(src)
    plen.copy_(torch.tensor([700, 650], device="cuda"))
    if sinks_as == "tensor":
        sinks.copy_(torch.tensor([[1, 2], [40, 41]], device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(outs, run(), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_gradient_request_raises():
    q, k, v, mask, plen, sinks = make(4)
    q.requires_grad_()
    res = call(q, k, v, mask, plen, sinks)
    with pytest.raises(NotImplementedError, match="compute no gradients"):
        res.out.float().sum().backward()
