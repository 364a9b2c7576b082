"""Run by test_installed_wheels.py inside a fresh environment holding only the flashstats-kernels wheel.

``python kernels_wheel_check.py EXAMPLE DEVICE COMPILER``: runs the package README's example (the file
EXAMPLE) with its tensors created on DEVICE, then the same call with every statistic family through
``torch.compile(fullgraph=True, backend=COMPILER)`` (after Dynamo's explain finds one graph), and on
CUDA captures it in a CUDA graph whose sink positions are a device tensor, replayed on new inputs.
Prints one ``ok`` line per check; any failure raises. Imports nothing of the workspace but the wheel.
"""

import sys
from pathlib import Path

import flashstats_kernels as fk
import torch

example, device, compiler = Path(sys.argv[1]).read_text(), sys.argv[2], sys.argv[3]
with torch.device(device):
    scope: dict = {}
    exec(example, scope)  # the README example as a user runs it ("auto": Triton on CUDA)
L, R = scope["L"], scope["R"]
q, k, v = scope["q"], scope["k"], scope["v"]
assert q.device.type == device and scope["res"].out.device.type == device
print("ok readme example", fk.__file__, fk.__version__)


def call(q, k, v, sinks):
    request = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    res = fk.response_attention(q, k, v, request=request, prompt_len=L - R)
    assert res.rows is not None and res.lookups is not None and res.columns is not None
    return res.out, res.lse, res.rows.entropy, res.lookups.sink_weights, res.columns.mean


def same(got, want, what):
    for g, w in zip(got, want, strict=True):
        diff = (g.double() - w.double()).abs().nan_to_num(0).max().item()
        assert torch.equal(g.isnan(), w.isnan()) and diff <= 1e-6, (what, diff)


sinks = torch.tensor([[0, 5]], device=device)
explain = torch._dynamo.explain(call)(q, k, v, sinks)
assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
torch._dynamo.reset()
compiled = torch.compile(call, fullgraph=True, backend=compiler)
for seed in (0, 1):  # new values, same shapes
    gen = torch.Generator().manual_seed(seed)
    args = [torch.randn(x.shape, generator=gen).to(device) for x in (q, k, v)]
    same(compiled(*args, sinks), call(*args, sinks), f"compiled {compiler}")
print("ok compiled fullgraph", compiler, "1 graph 0 breaks")

if device == "cuda":
    static = [x.clone() for x in (q, k, v)]
    static_sinks = sinks.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: Triton compiles (and tunes) here
        for _ in range(2):
            call(*static, static_sinks)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call(*static, static_sinks)
    new = [torch.randn_like(x) for x in static]
    new_sinks = torch.tensor([[3, 200]], device=device)
    for dst, src in zip([*static, static_sinks], [*new, new_sinks], strict=True):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    same(captured, call(*new, new_sinks), "cuda graph replay")
    print("ok cuda graph replay equals eager, sink positions as a device tensor")
