"""Non-positive scales and non-finite inputs: the rule of SEMANTICS.md on every backend and the decode path.

A NaN or +inf score at a visible key makes the row NaN (out, lse, T1, T2, and the columns of the keys it
sees); a -inf score is a zero weight; NaN in ``v`` reaches ``out`` only. Before the fix the Triton kernels
returned ``lse = -inf``, entropy 0 (a "fully masked" row) for NaN keys, and NaN or -inf for ``scale <= 0``.
"""

from __future__ import annotations

import dataclasses
import math

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


def _dead_row_inputs():
    """Head 0's first row (position 6) sees only -inf scores; its rows 1, 2 and head 1 are finite."""
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 3, 16, generator=gen)
    k, v = torch.randn(1, 2, 9, 16, generator=gen), torch.randn(1, 2, 9, 16, generator=gen)
    q[0, 0, :, 0] = 1.0
    k[0, 0, :7, 0] = float("-inf")  # KV head 0 only: query head 1 reads KV head 1
    return q, k, v


def _assert_dead_row(got: fk.AttentionResult, eps: float) -> None:
    """Row 0 of head 0 reads like a fully masked row (SEMANTICS.md), never NaN."""
    assert got.lse[0, 0, 0] == float("-inf") and torch.isfinite(got.lse[0, 0, 1:]).all()
    for name, t in _named(got).items():
        assert not torch.isnan(t).any(), name
    for field in ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support"):
        assert getattr(got.rows, field)[0, 0, 0] == 0.0, field
    assert math.isclose(float(got.lookups.diag_log[0, 0, 0]), math.log(eps), rel_tol=1e-6)
    assert got.lookups.prev_weight[0, 0, 0] == 0 and (got.lookups.sink_weights[0, 0, 0] == 0).all()


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
def test_row_of_only_neg_inf_scores_reads_like_a_fully_masked_row(backend):
    q, k, v = _dead_row_inputs()
    got = fk.response_attention(q, k, v, request=REQUEST, backend=backend)
    want = fk.naive_response_attention(q.double(), k.double(), v.double(), request=REQUEST)
    _assert_dead_row(got, REQUEST.diag_eps)
    _assert_dead_row(want, REQUEST.diag_eps)
    _assert_same(got, want)
    # the post-passes read the stored lse = -inf the same way
    lookups = fk.response_lookups(q, k, got.lse, sink_positions=(0, 3), diag_eps=1e-20, backend=backend)
    assert torch.equal(lookups.diag_log, got.lookups.diag_log)
    columns = fk.response_columns(q, k, got.lse, backend=backend)
    assert torch.equal(columns.mean, got.columns.mean) and torch.equal(columns.sum, got.columns.sum)


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_row_of_only_neg_inf_scores_reads_like_a_fully_masked_row(backend):
    q, k, v = _dead_row_inputs()
    request = dataclasses.replace(REQUEST, columns=True)
    state = fk.ColumnState.zeros(1, 2, 9, "cpu")
    got = fk.decode_attention(q, k, v, kv_len=9, request=request, column_state=state, backend=backend)
    _assert_dead_row(got, REQUEST.diag_eps)
    want = fk.response_attention(q, k, v, request=REQUEST, backend="torch")
    _assert_same(dataclasses.replace(got, columns=state.stats()), want)
    # counts do not depend on scores: the row of only -inf scores counts (with weight 0) for keys 0..6
    assert state.count[0].tolist() == [3.0] * 7 + [2.0, 1.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_lse_of_neg_inf_gives_no_weight_in_the_post_passes(backend):
    """A stored lse of -inf (a row without weight) reads 0 everywhere, whatever the keys' scores."""
    q, k, _ = _inputs(seed=5)
    lse = torch.full((1, 2, 3), float("-inf"))
    lookups = fk.response_lookups(q, k, lse, sink_positions=(0, 3), diag_eps=1e-20, backend=backend)
    assert (lookups.diag_log == math.log(1e-20)).all()
    assert (lookups.prev_weight == 0).all() and (lookups.sink_weights == 0).all()
    columns = fk.response_columns(q, k, lse, backend=backend)
    assert (columns.sum == 0).all() and (columns.mean == 0).all()


def _state_stats(scores: torch.Tensor) -> tuple[torch.Tensor, fk.RowStats]:
    visible = torch.ones(scores.shape[-1], dtype=torch.bool)
    return fk.finalize_state(fk.row_state(scores, visible, torch.zeros_like(visible)))


@NAN_WARNINGS
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "pinf"])
def test_row_state_makes_nan_and_pos_inf_scores_a_nan_row(bad):
    s = torch.tensor([[0.5, bad, 1.0], [0.5, 0.25, 1.0]])
    lse, rows = _state_stats(s)
    assert torch.isnan(lse[0]) and torch.isfinite(lse[1])
    for field in dataclasses.fields(rows):
        assert torch.isnan(getattr(rows, field.name)[0]), field.name
    # merging a NaN state into a clean one keeps the row NaN
    visible, is_prompt = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)
    merged = fk.merge_states(fk.row_state(s[:1], visible, is_prompt), fk.row_state(s[1:], visible, is_prompt))
    assert torch.isnan(fk.finalize_state(merged)[0]).all()


def test_row_state_counts_neg_inf_keys_like_the_kernels():
    """A -inf score is a zero weight whose key still counts in n (normalized entropy = H / log n)."""
    q, k, v = _inputs(seed=6, hq=1, r=1, seq=5)
    k[0, 0, 1, 0] = float("-inf")
    q[..., 0] = 1.0
    got = fk.response_attention(q, k, v, request=fk.StatsRequest(rows=True), scale=1.0, backend="torch")
    s = (q[0, 0] @ k[0, 0].T)[0]  # [5] scores of the one row (scale 1), s[1] = -inf
    lse, rows = _state_stats(s)
    torch.testing.assert_close(lse, got.lse[0, 0, 0])
    torch.testing.assert_close(rows.normalized_entropy, got.rows.normalized_entropy[0, 0, 0])
    torch.testing.assert_close(rows.normalized_entropy, rows.entropy / math.log(5))


@NAN_WARNINGS
@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_of_only_neg_inf_scores_on_interior_column_tiles(backend):
    """Every row of head 0 sees only -inf scores, on key tiles that whole row tiles see (L = R = 160)."""
    gen = torch.Generator().manual_seed(8)
    q, k = torch.randn(1, 2, 160, 16, generator=gen), torch.randn(1, 2, 160, 16, generator=gen)
    q[0, 0, :, 0] = 1.0
    k[0, 0, :, 0] = float("-inf")
    lse = fk.response_attention(q, k, k, backend=backend).lse
    assert (lse[0, 0] == float("-inf")).all() and torch.isfinite(lse[0, 1]).all()
    got = fk.response_columns(q, k, lse, prompt_len=0, backend=backend)
    want = fk.naive_response_attention(
        q.double(), k.double(), k.double(), request=fk.StatsRequest(columns=True), prompt_len=0
    ).columns
    assert (got.sum[0, 0] == 0).all() and (got.mean[0, 0] == 0).all()
    torch.testing.assert_close(got.sum.double(), want.sum, atol=3e-5, rtol=3e-5)
    torch.testing.assert_close(got.mean.double(), want.mean, atol=3e-5, rtol=3e-5)
