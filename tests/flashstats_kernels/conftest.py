"""Shared helpers of the flashstats-kernels tests, handed to tests as fixtures.

``make_case`` draws inputs for a :class:`Case`; ``assert_matches`` checks a backend's result, every
statistic against the fp64 naive reference with the tolerances of ``TOL``.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import flashstats_kernels as fk
import pytest
import torch

# Statistic tolerances (atol, rtol) per input dtype. Inputs are upcast exactly before fp32 accumulation,
# so the statistics are accurate to fp32 rounding for every input dtype. `out` follows FlashAttention's
# rule instead: its error is at most twice that of the same reference computed in the input dtype, plus
# twice the dtype's rounding error at the output's magnitude (flash-attention's `fwd_atol`).
TOL = {
    torch.float32: (3e-5, 3e-5),
    torch.bfloat16: (3e-5, 3e-5),
    torch.float16: (3e-5, 3e-5),
    torch.float64: (3e-5, 3e-5),  # statistics are returned in float32 even for float64 inputs
}
OUT_SLACK = 2e-6  # absolute slack on top of the 2x rule (fp32 accumulation of `out` itself)


@dataclasses.dataclass(frozen=True)
class Case:
    b: int = 1
    hq: int = 2
    hkv: int = 1
    r: int = 3
    seq: int = 7
    d: int = 16
    pad: str = "none"  # none | left | middle | full (batch element 0 has no real token)
    softcap: float | None = None
    window: int | None = None
    per_batch: bool = False  # per-batch prompt_len and sink positions
    prompt_len: int | None = None  # shared prompt length (None: L - R)
    transposed: bool = False  # q, k, v as transposed [B, T, H, D] views
    dtype: torch.dtype = torch.float32
    seed: int = 0


def make_case(case: Case) -> tuple[tuple[torch.Tensor, ...], dict, fk.StatsRequest]:
    """Inputs, keyword arguments and a full StatsRequest for ``case``."""
    gen = torch.Generator().manual_seed(case.seed)

    def draw(h: int, t: int) -> torch.Tensor:
        if case.transposed:
            return torch.randn(case.b, t, h, case.d, generator=gen).transpose(1, 2)
        return torch.randn(case.b, h, t, case.d, generator=gen)

    q = (draw(case.hq, case.r) * 1.5).to(case.dtype)
    k, v = draw(case.hkv, case.seq).to(case.dtype), draw(case.hkv, case.seq).to(case.dtype)
    kwargs: dict = {"softcap": case.softcap, "window": case.window}
    if case.pad != "none":
        mask = torch.ones(case.b, case.seq, dtype=torch.bool)
        cut = max(1, case.seq // 3)
        if case.pad == "left":
            mask[:, :cut] = False
        elif case.pad == "middle":
            mask[:, cut : 2 * cut] = False
        else:
            mask[0] = False
            mask[:, case.seq // 2] = False
        kwargs["key_mask"] = mask
    if case.per_batch:
        kwargs["prompt_len"] = torch.randint(0, case.seq + 1, (case.b,), generator=gen)
        sinks = torch.randint(-1, case.seq + 1, (case.b, 2), generator=gen)
    else:
        kwargs["prompt_len"] = case.prompt_len
        sinks = (0, case.seq // 2)
    request = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks, diag_eps=1e-20)
    return (q, k, v), kwargs, request


def flatten(result: fk.AttentionResult) -> dict[str, torch.Tensor]:
    named = {"out": result.out, "lse": result.lse}
    for part in (result.rows, result.lookups, result.columns):
        if part is not None:
            named.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    return named


def out_in_dtype(q, k, v, kwargs) -> torch.Tensor:
    """The attention output computed in the input dtype (scores, softmax output and P @ V), as float64."""
    b, hq, r, d = q.shape
    seq = k.shape[2]
    g = hq // k.shape[1]
    s = (q @ k.repeat_interleave(g, dim=1).transpose(-1, -2)) * (kwargs.get("scale") or d**-0.5)
    if kwargs.get("softcap") is not None:
        s = kwargs["softcap"] * torch.tanh(s / kwargs["softcap"])
    pos = torch.arange(seq - r, seq, device=q.device)[:, None]
    key = torch.arange(seq, device=q.device)[None, :]
    vis = key <= pos
    if kwargs.get("window") is not None:
        vis = vis & (key > pos - kwargs["window"])
    vis = vis[None, None]
    if kwargs.get("key_mask") is not None:
        vis = vis & kwargs["key_mask"][:, None, None, :]
    p = torch.softmax(s.masked_fill(~vis, float("-inf")), dim=-1).nan_to_num(0.0).to(q.dtype)
    return (p @ v.repeat_interleave(g, dim=1)).double()


def assert_matches(got: fk.AttentionResult, inputs, kwargs, request) -> None:
    """Checks ``got`` against the fp64 naive reference of the same inputs."""
    q = inputs[0]
    dtype = q.dtype
    ref = fk.naive_response_attention(*inputs, request=request, **kwargs)
    ref_lowp_out = out_in_dtype(*inputs, kwargs)
    atol, rtol = TOL[dtype]
    g, r = flatten(got), flatten(ref)
    assert set(g) == set(r)
    for name, want in r.items():
        have = g[name]
        assert have.shape == want.shape, name
        assert not torch.isnan(have).any(), f"{name} has NaN"
        if name == "out":
            assert have.dtype == dtype
            err = (have.double() - want).abs().max().item() if have.numel() else 0.0
            bound = 2 * (ref_lowp_out - want).abs().max().item() if have.numel() else 0.0
            # FlashAttention's test slack: twice the rounding error of the dtype at the output's magnitude
            lowp = want.to(dtype)
            slack = 2 * (lowp + 0.3 - 0.3 - lowp).abs().max().item() if have.numel() else 0.0
            assert err <= bound + slack + OUT_SLACK, (name, err, bound, slack)
            continue
        assert have.dtype == torch.float32, name
        torch.testing.assert_close(
            have.double(), want, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.fixture
def harness():
    """The helpers above, as one namespace."""
    return SimpleNamespace(Case=Case, make_case=make_case, flatten=flatten, assert_matches=assert_matches)
