"""Non-positive scales and non-finite inputs: the rule of SEMANTICS.md on every backend and the decode path.

A NaN or +inf score at a visible key makes the row NaN (out, lse, T1, T2, and the columns of the keys it
sees); a -inf score is a zero weight; NaN in ``v`` reaches ``out`` only. Before the fix the Triton kernels
returned ``lse = -inf``, entropy 0 (a "fully masked" row) for NaN keys, and NaN or -inf for ``scale <= 0``.
"""

from __future__ import annotations

import dataclasses

import flashstats_kernels as fk
import pytest
import torch

BACKENDS = ["torch", "triton"]
# NumPy (under Triton's interpreter) warns on the NaN arithmetic these tests ask for
NAN_WARNINGS = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
REQUEST = fk.StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0, 3), diag_eps=1e-20)


def _inputs(seed: int = 0, hq: int = 2, r: int = 3, seq: int = 9, d: int = 16):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, hq, r, d, generator=gen)
    return q, torch.randn(1, 1, seq, d, generator=gen), torch.randn(1, 1, seq, d, generator=gen)


def _named(result: fk.AttentionResult) -> dict[str, torch.Tensor]:
    named = {"out": result.out, "lse": result.lse}
    for part in (result.rows, result.lookups, result.columns):
        if part is not None:
            named.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    return named


def _assert_same(got: fk.AttentionResult, want: fk.AttentionResult) -> None:
    """Same NaN pattern, same infinities, finite values within fp32 rounding of the fp64 reference."""
    for name, ref in _named(want).items():
        have, ref = _named(got)[name].double(), ref.double()
        assert torch.equal(torch.isnan(have), torch.isnan(ref)), name
        torch.testing.assert_close(have, ref, atol=3e-5, rtol=3e-5, equal_nan=True, msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("softcap", [None, 5.0], ids=["nocap", "cap5"])
@pytest.mark.parametrize("scale", [0.0, -1.0, -0.125, 1e-30])
def test_non_positive_scale_matches_reference(backend, softcap, scale):
    q, k, v = _inputs()
    mask = torch.ones(1, k.shape[2], dtype=torch.bool)
    mask[0, 2] = False
    kw = dict(scale=scale, softcap=softcap, key_mask=mask)
    got = fk.response_attention(q, k, v, request=REQUEST, backend=backend, **kw)
    want = fk.naive_response_attention(q.double(), k.double(), v.double(), request=REQUEST, **kw)
    assert torch.isfinite(got.lse).all()
    _assert_same(got, want)
    if scale == 0.0:  # uniform weights over the visible keys: entropy log n
        n = torch.tensor([6.0, 7.0, 8.0])  # rows at 6, 7, 8 see keys 0..p except the masked key 2
        torch.testing.assert_close(got.rows.entropy[0, 0], torch.log(n))


def _poison(t: torch.Tensor, pos: int, value: float) -> torch.Tensor:
    t = t.clone()
    t[0, :, pos, 0] = value
    return t


CASES = {
    "k_nan_late": ("k", 7, float("nan")),  # rows at 6 are clean, rows at 7 and 8 see the NaN key
    "k_nan_first": ("k", 0, float("nan")),
    "q_inf": ("q", 1, float("inf")),  # one row's scores are +-inf
    "k_inf": ("k", 4, float("inf")),
    "k_neg_inf": ("k", 4, float("-inf")),
    "v_nan": ("v", 5, float("nan")),
}


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("softcap", [None, 4.0], ids=["nocap", "cap4"])
def test_non_finite_inputs_follow_the_rule(backend, case, softcap):
    which, pos, value = CASES[case]
    q, k, v = _inputs(seed=1)
    inputs = {"q": q, "k": k, "v": v}
    inputs[which] = _poison(inputs[which], pos, value)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    got = fk.response_attention(q, k, v, request=REQUEST, backend=backend, softcap=softcap)
    want = fk.naive_response_attention(q.double(), k.double(), v.double(), request=REQUEST, softcap=softcap)
    _assert_same(got, want)
    if case == "k_nan_late":  # never a silent "fully masked" row
        assert not torch.isnan(got.lse[0, :, 0]).any() and torch.isnan(got.lse[0, :, 1:]).all()
        assert torch.isnan(got.rows.entropy[0, :, 1:]).all() and not (got.lse == float("-inf")).any()
    if case == "v_nan":  # values reach `out` only
        assert torch.isnan(got.out).any() and torch.isfinite(got.lse).all()


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", [-0.5, None])
def test_decode_path_follows_the_rule(backend, scale):
    q, k, v = _inputs(seed=2, r=1)
    k = _poison(k, 5, float("nan"))
    request = fk.StatsRequest(rows=True, lookups=True, sink_positions=(0,), diag_eps=1e-20)
    for kv_len, poisoned in ((5, False), (8, True)):  # the NaN key is in the cache only from kv_len 6
        got = fk.decode_attention(q, k, v, kv_len=kv_len, request=request, scale=scale, backend=backend)
        want = fk.response_attention(
            q, k[:, :, :kv_len], v[:, :, :kv_len], request=request, scale=scale, backend="torch"
        )
        assert bool(torch.isnan(got.lse).all()) == poisoned and bool(torch.isnan(got.lse).any()) == poisoned
        _assert_same(got, want)


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("softcap", [None, 4.0], ids=["nocap", "cap4"])
def test_neg_inf_key_on_an_interior_tile(backend, softcap):
    """A -inf score on a key tile that every row sees whole (keys 0..127 of rows 157..159, tiles of 64).

    The forward skips T1's zero-weight clamp on such tiles; the -inf score makes its entropy sum NaN
    there, and the row tile is redone with the clamp: the statistics still follow the rule.
    """
    q, k, v = _inputs(seed=3, hq=4, seq=160)
    q[0, :, :, 0] = torch.tensor([1.0, -1.0, 2.0, 0.5])[:, None]  # heads 0, 2, 3 see -inf, head 1 +inf
    k = _poison(k, 4, float("-inf"))
    got = fk.response_attention(q, k, v, request=REQUEST, backend=backend, softcap=softcap)
    want = fk.naive_response_attention(q.double(), k.double(), v.double(), request=REQUEST, softcap=softcap)
    _assert_same(got, want)
    assert torch.isfinite(got.rows.entropy[0, [0, 2, 3]]).all()
    if softcap is None:  # (a soft cap maps +-inf to +-softcap: every row stays finite)
        assert torch.isnan(got.lse[0, 1]).all()
