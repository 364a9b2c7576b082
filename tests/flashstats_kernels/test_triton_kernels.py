"""The Triton kernels (T1 forward, T2 lookups, T3 columns) against the fp64 reference.

On a machine without CUDA the root conftest sets ``TRITON_INTERPRET=1``, so these run the real kernels
under Triton's interpreter on small shapes. Outputs are poisoned with NaN before each call (every
``torch.empty`` inside the launcher returns NaN-filled memory), so an element a kernel forgets to
write fails the comparison.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import pytest
import torch
import triton
import triton.language as tl
from flashstats_kernels.ops._exp import exp2_fma
from flashstats_kernels.ops._fused import d_class, pinned_config, tune_configs
from flashstats_kernels.ops.columns.fused import columns_triton
from flashstats_kernels.ops.columns.naive import naive_columns
from flashstats_kernels.ops.forward.fused import forward_triton, split_head_dim, tune_class
from flashstats_kernels.ops.forward.naive import naive_forward, naive_visibility
from flashstats_kernels.ops.lookups.fused import lookups_triton
from flashstats_kernels.ops.lookups.naive import naive_lookups

# Statistics are reduced in fp32 from exact products of the (rounded) inputs: the same tolerance for
# every input dtype. ``out`` follows FlashAttention's rule: its error against fp64 is at most twice the
# error of the same attention computed in the input dtype, plus OUT_FLOOR.
STAT_TOL = {
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.bfloat16: {"atol": 2e-5, "rtol": 2e-5},
    torch.float16: {"atol": 2e-5, "rtol": 2e-5},
    torch.float8_e5m2: {"atol": 2e-5, "rtol": 2e-5},
}
OUT_FLOOR = {torch.float32: 1e-5, torch.bfloat16: 1e-3, torch.float16: 1e-4, torch.float8_e5m2: 1e-2}
DIAG_EPS = 1e-30


@dataclasses.dataclass(frozen=True)
class Case:
    """One problem: sizes, dtype and the masking options."""

    B: int
    Hq: int
    Hkv: int
    R: int
    L: int
    D: int
    dtype: torch.dtype = torch.float32
    pad: str = "none"  # none | left | middle | deep (rows that see no key) | empty (a batch without keys)
    softcap: float | None = None
    window: int | None = None
    prompt: str = "default"  # default (L - R) | batch (a different prompt_len per batch element)
    layout: str = "bhtd"  # bhtd (contiguous) | bthd (transposed views, as Transformers hands over)

    @property
    def id(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        parts = [f"B{self.B}-L{self.L}-R{self.R}-HQ{self.Hq}-H{self.Hkv}-D{self.D}-{dt}", self.pad]
        parts += [f"cap{self.softcap}"] if self.softcap else []
        parts += [f"win{self.window}"] if self.window else []
        return "-".join(parts + [self.prompt, self.layout])


CASES = [
    Case(1, 1, 1, 1, 1, 64),
    Case(2, 2, 1, 2, 2, 64),  # R = L, P = 0
    Case(2, 4, 1, 1, 63, 80, pad="left", prompt="batch"),
    Case(1, 2, 1, 111, 111, 128, pad="middle", softcap=5.0, layout="bthd"),
    Case(2, 2, 2, 37, 111, 80, pad="middle", window=16),
    Case(2, 4, 1, 90, 300, 64, pad="left", softcap=30.0, window=40, prompt="batch", layout="bthd"),
    Case(2, 4, 2, 40, 63, 64, pad="deep", window=5, prompt="batch"),
    Case(2, 2, 1, 20, 30, 64, pad="empty"),
    Case(2, 4, 2, 50, 111, 64, dtype=torch.bfloat16, pad="middle", prompt="batch"),
    Case(1, 2, 2, 33, 63, 80, dtype=torch.float16, pad="left", softcap=20.0, layout="bthd"),
]

# Soft-cap x window x head dim without a key mask: the tile-range split of the forward (window edge tiles
# masked, interior tiles unmasked, diagonal tiles masked), with R = L (prompt rows and unscored layers
# run this Base kernel over every row) and R < L; windows wider and narrower than a row tile plus a key tile.
VARIANT_CASES = [
    Case(1, 2, 1, 400, 400, 64, softcap=50.0, window=150),
    Case(1, 4, 2, 200, 400, 80, window=150, prompt="batch"),
    Case(1, 2, 1, 160, 330, 256, softcap=50.0, window=100),
    Case(1, 2, 2, 300, 300, 96, window=40, layout="bthd"),
    Case(1, 2, 1, 230, 230, 128, softcap=30.0),
]


def make_inputs(case: Case, seed: int, device: str = "cpu") -> dict:
    """Random q, k, v, key mask, prompt_len and sink positions for ``case``."""
    gen = torch.Generator().manual_seed(seed)
    B, L, R = case.B, case.L, case.R

    def rand(h: int, t: int) -> torch.Tensor:
        x = torch.randn(B, t, h, case.D, generator=gen) * 1.5
        x = x.to(device=device, dtype=case.dtype)
        return x.transpose(1, 2) if case.layout == "bthd" else x.transpose(1, 2).contiguous()

    key_mask = torch.ones(B, L, dtype=torch.bool)
    if case.pad == "left":
        for b in range(B):
            key_mask[b, : (b * L) // 3 + b] = False  # batch 0 unpadded; later ones padded past the prompt
    elif case.pad == "middle":
        key_mask[:, L // 4 : L // 4 + max(1, L // 5)] = False
        key_mask[-1, L - R // 2 - 1] = False  # a padded response position too
    elif case.pad == "deep":
        key_mask[-1, : L - R + R // 3] = False  # the first R // 3 rows of the last batch see nothing
    elif case.pad == "empty":
        key_mask[-1] = False
    prompt = torch.full((B,), L - R, dtype=torch.int64)
    if case.prompt == "batch":
        prompt = torch.randint(0, L + 1, (B,), generator=gen)
    sinks = torch.randint(0, L, (B, 4), generator=gen)
    sinks[0] = torch.tensor([0, L // 2, L, -1])  # the first batch also reads out-of-range positions
    return {
        "q": rand(case.Hq, R),
        "k": rand(case.Hkv, L),
        "v": rand(case.Hkv, L),
        "key_mask": key_mask.to(device) if case.pad != "none" else None,
        "prompt_len": prompt.to(device),
        "sink_positions": sinks.to(device),
        "scale": case.D**-0.5,
        "softcap": case.softcap,
        "window": case.window,
    }


def out_in_dtype(x: dict) -> torch.Tensor:
    """The attention output computed in the inputs' dtype (FlashAttention's comparison baseline)."""
    q, k, v = x["q"], x["k"], x["v"]
    group = q.shape[1] // k.shape[1]
    work = torch.float16 if q.dtype == torch.float8_e5m2 else q.dtype
    kk = k.to(work).repeat_interleave(group, dim=1)
    vv = v.to(work).repeat_interleave(group, dim=1)
    s = (q.to(work) @ kk.transpose(-1, -2)) * x["scale"]
    if x["softcap"] is not None:
        s = x["softcap"] * torch.tanh(s / x["softcap"])
    B, _, R, L = s.shape
    vis = naive_visibility(B, R, L, key_mask=x["key_mask"], window=x["window"], device=q.device)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(work)
    return (p @ vv).to(q.dtype)


def check_out(out: torch.Tensor, ref64: torch.Tensor, base: torch.Tensor, floor: float) -> float:
    """FlashAttention's rule; returns the kernel's max error."""
    err = (out.double() - ref64).abs().max().item()
    err_base = (base.double() - ref64).abs().max().item()
    assert err <= 2 * err_base + floor, f"out error {err:.3g} > 2 * {err_base:.3g} + {floor:.1g}"
    return err


def assert_stats(got: object, ref: object, tol: dict) -> dict[str, float]:
    """Compares every tensor field of two statistic dataclasses; returns the max error per field."""
    errors = {}
    for field in dataclasses.fields(got):
        g, r = getattr(got, field.name), getattr(ref, field.name)
        assert g.dtype == torch.float32, field.name
        torch.testing.assert_close(g.double(), r, **tol, msg=lambda m, n=field.name: f"{n}: {m}")
        errors[field.name] = (g.double() - r).abs().nan_to_num(0.0).max().item()
    return errors


def run_and_check(case: Case, seed: int) -> dict[str, float]:
    """Runs the three kernels on one case and checks each output against the fp64 reference."""
    x = make_inputs(case, seed, device="cuda" if torch.cuda.is_available() else "cpu")
    common = {n: x[n] for n in ("key_mask", "prompt_len", "scale", "softcap", "window")}
    tol = STAT_TOL[case.dtype]
    out, lse, rows = forward_triton(x["q"], x["k"], x["v"], **common, rows=True)
    ref_out, ref_lse, ref_rows = naive_forward(x["q"], x["k"], x["v"], **common)
    assert out.dtype == case.dtype and out.shape == x["q"].shape
    errors = {"out": check_out(out, ref_out, out_in_dtype(x), OUT_FLOOR[case.dtype])}
    torch.testing.assert_close(lse.double(), ref_lse, **tol)
    errors |= assert_stats(rows, ref_rows, tol)

    lk = lookups_triton(x["q"], x["k"], lse, **common, sink_positions=x["sink_positions"], diag_eps=DIAG_EPS)
    ref_lk = naive_lookups(x["q"], x["k"], **common, sink_positions=x["sink_positions"], diag_eps=DIAG_EPS)
    errors |= assert_stats(lk, ref_lk, tol)

    cols = columns_triton(x["q"], x["k"], lse, **common)
    errors |= assert_stats(cols, naive_columns(x["q"], x["k"], **common), tol)
    again = columns_triton(x["q"], x["k"], lse, **common)
    assert torch.equal(cols.sum, again.sum) and torch.equal(cols.mean, again.mean)  # bitwise
    return errors


@pytest.fixture
def poisoned(monkeypatch):
    """Every float ``torch.empty`` returns NaN-filled memory during the test."""
    real_empty = torch.empty

    def nan_empty(*size, **kwargs):
        t = real_empty(*size, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", nan_empty)


SLOW = pytest.mark.slow


def some_slow(cases: list[Case], fast: set[int]) -> list:
    """The cases, those not in ``fast`` marked slow (the default run keeps one case per behaviour)."""
    return [case if i in fast else pytest.param(case, marks=SLOW) for i, case in enumerate(cases)]


@pytest.mark.parametrize("case", some_slow(CASES, fast={0, 1, 2, 6, 7, 8}), ids=lambda c: c.id)
def test_kernels_match_fp64_reference(case, poisoned):
    run_and_check(case, seed=zlib.crc32(case.id.encode()) % 1000)


@pytest.mark.parametrize("case", some_slow(VARIANT_CASES, fast=set()), ids=lambda c: c.id)
def test_softcap_window_variants_match_fp64_reference(case, poisoned):
    run_and_check(case, seed=zlib.crc32(case.id.encode()) % 1000)


@pytest.mark.slow  # test_varlen.py runs GQA with soft-cap and window on Triton by default
def test_second_seed_gqa_window_softcap(poisoned):
    run_and_check(Case(2, 4, 2, 45, 111, 80, pad="middle", softcap=10.0, window=30, prompt="batch"), seed=7)


BASE_CASES = [
    Case(2, 4, 2, 40, 111, 64, pad="middle", window=50),
    # R = L without a key mask: the call that prompt rows and unscored layers make
    Case(1, 2, 1, 330, 330, 64, softcap=50.0),
    Case(1, 2, 1, 330, 330, 64, softcap=50.0, window=150),
]


@pytest.mark.parametrize("case", some_slow(BASE_CASES, fast={0}), ids=lambda c: c.id)
def test_base_forward_equals_row_stats_forward(case, poisoned):
    """The Base variant gives T1's output and LSE bitwise."""
    x = make_inputs(case, seed=3)
    common = {n: x[n] for n in ("key_mask", "prompt_len", "scale", "softcap", "window")}
    out, lse, rows = forward_triton(x["q"], x["k"], x["v"], **common, rows=False)
    out_t1, lse_t1, _ = forward_triton(x["q"], x["k"], x["v"], **common, rows=True)
    assert rows is None
    torch.testing.assert_close(out, out_t1, atol=0, rtol=0)
    torch.testing.assert_close(lse, lse_t1, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("d", "blocks"),
    [(64, (64, 0)), (72, (128, 0)), (80, (64, 16)), (96, (64, 32)), (112, (128, 0)), (128, (128, 0)),
     (40, (64, 0)), (48, (32, 16)), (160, (128, 32)), (192, (128, 64)), (256, (256, 0)), (8, (16, 0))],
)  # fmt: skip
def test_split_head_dim_uses_a_narrow_tail_instead_of_padding(d, blocks, monkeypatch):
    assert split_head_dim(d) == blocks
    # d = 80 and 96 split out of 128 tune over their own table (register-capped candidates first)
    assert tune_class(*blocks) == (96 if d in (80, 96) else d_class(max(16, triton.next_power_of_2(d))))
    monkeypatch.setenv("FLASHSTATS_SPLIT_D", "0")
    assert split_head_dim(d) == (max(16, triton.next_power_of_2(d)), 0)


def test_tuning_candidates_carry_an_optional_register_cap(monkeypatch):
    table = ((128, 64, 8, 3), (128, 64, 8, 3, 128))
    assert [c.maxnreg for c in tune_configs(table, ("BLOCK_M", "BLOCK_N"))] == [None, 128]
    monkeypatch.setenv("FLASHSTATS_CONFIG_INDEX", "1")
    assert pinned_config(table) == {
        "BLOCK_M": 128,
        "BLOCK_N": 64,
        "num_warps": 8,
        "num_stages": 3,
        "maxnreg": 128,
    }
    monkeypatch.setenv("FLASHSTATS_CONFIG_INDEX", "0")
    assert "maxnreg" not in pinned_config(table)


def test_deterministic_algorithms_pin_the_first_candidate_unless_a_pin_is_set(monkeypatch):
    """Autotuning picks by timing (it may differ between processes); torch's determinism flag fixes it."""
    table = ((128, 64, 8, 3), (64, 64, 4, 2))
    monkeypatch.delenv("FLASHSTATS_CONFIG_INDEX", raising=False)
    assert pinned_config(table) is None  # autotuned
    flag = torch.are_deterministic_algorithms_enabled()
    before = flag, torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert pinned_config(table) == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
        monkeypatch.setenv("FLASHSTATS_CONFIG_INDEX", "1")  # an explicit pin still wins
        assert pinned_config(table)["BLOCK_M"] == 64
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


SPLIT_CASES = [  # the head dim as a power-of-two head plus a narrow tail
    Case(1, 4, 2, 70, 150, 80, pad="middle", prompt="batch"),
    Case(1, 2, 1, 90, 90, 96, softcap=30.0, window=40),
    Case(2, 2, 2, 33, 100, 160, pad="left", layout="bthd"),
]


@pytest.mark.parametrize("case", some_slow(SPLIT_CASES, fast=set()), ids=lambda c: c.id)
def test_split_head_dim_matches_fp64_reference_and_the_padded_kernel(case, poisoned, monkeypatch):
    run_and_check(case, seed=zlib.crc32(case.id.encode()) % 1000)
    x = make_inputs(case, seed=5)
    common = {n: x[n] for n in ("key_mask", "prompt_len", "scale", "softcap", "window")}
    split = forward_triton(x["q"], x["k"], x["v"], **common, rows=True)
    monkeypatch.setenv("FLASHSTATS_SPLIT_D", "0")
    padded = forward_triton(x["q"], x["k"], x["v"], **common, rows=True)
    for a, b in zip(split[:2], padded[:2], strict=True):
        torch.testing.assert_close(a, b, **STAT_TOL[case.dtype])
    for f in dataclasses.fields(split[2]):
        torch.testing.assert_close(
            getattr(split[2], f.name), getattr(padded[2], f.name), **STAT_TOL[case.dtype]
        )


def test_fully_masked_rows_values(poisoned):
    """A row that sees no key: out 0, lse -inf, statistics 0, diag_log = log(eps), no NaN anywhere."""
    x = make_inputs(Case(2, 2, 1, 20, 30, 64, pad="empty"), seed=1)
    common = {n: x[n] for n in ("key_mask", "prompt_len", "scale", "softcap", "window")}
    out, lse, rows = forward_triton(x["q"], x["k"], x["v"], **common, rows=True)
    lk = lookups_triton(x["q"], x["k"], lse, **common, sink_positions=x["sink_positions"], diag_eps=DIAG_EPS)
    cols = columns_triton(x["q"], x["k"], lse, **common)
    assert torch.all(out[1] == 0) and torch.all(lse[1] == float("-inf"))
    for field in dataclasses.fields(rows):
        assert torch.all(getattr(rows, field.name)[1] == 0), field.name
    assert torch.all(lk.diag_log[1] == torch.tensor(math.log(DIAG_EPS), dtype=torch.float32))
    assert torch.all(lk.prev_weight[1] == 0) and torch.all(lk.sink_weights[1] == 0)
    assert torch.all(cols.sum[1] == 0) and torch.all(cols.mean[1] == 0)
    assert torch.isfinite(out).all() and not lse.isnan().any()


def test_launcher_rejects_what_the_kernels_cannot_take(monkeypatch):
    q = torch.zeros(1, 2, 4, 320)
    k = torch.zeros(1, 1, 8, 320)
    with pytest.raises(ValueError, match="D <= 256"):
        forward_triton(
            q, k, k, key_mask=None, prompt_len=torch.zeros(1, dtype=torch.int64), scale=1.0,
            softcap=None, window=None, rows=True,
        )  # fmt: skip
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # read at call time: CPU tensors are then refused
    with pytest.raises(ValueError, match="CUDA"):
        columns_triton(
            q[..., :64], k[..., :64], torch.zeros(1, 2, 4), key_mask=None,
            prompt_len=torch.zeros(1, dtype=torch.int64), scale=1.0, softcap=None, window=None,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# The same checks on CUDA (run on the H200 through the device tool): the real compiled kernels, every
# supported dtype, head dims up to 256, sequences up to 32K. The fp64 reference runs on the GPU.

GPU_CASES = [
    Case(2, 4, 2, 300, 1000, d, dt, pad="middle", prompt="batch", layout="bthd")
    for dt in (torch.bfloat16, torch.float16, torch.float8_e5m2)
    for d in (64, 128, 256)
] + [
    Case(1, 4, 1, 200, 700, d, torch.bfloat16, pad="left") for d in (72, 80, 96, 112, 160, 192)
] + [
    Case(2, 4, 2, 500, 2000, 128, torch.bfloat16, pad="deep", softcap=30.0, window=256, prompt="batch"),
    Case(1, 2, 1, 100, 500, 64, torch.float32, pad="middle", window=100),
    Case(1, 2, 2, 4096, 4096, 128, torch.float16, pad="left", layout="bthd"),
    Case(1, 4, 1, 2048, 8192, 256, torch.bfloat16, softcap=50.0, prompt="batch"),
    Case(1, 2, 1, 1024, 32768, 128, torch.bfloat16, pad="middle"),
] + [  # soft-cap x window x head dim, no key mask (the split tile ranges), R = L and R < L
    Case(1, 4, 2, 3000, 3000, d, torch.bfloat16, softcap=50.0, window=1024) for d in (64, 96, 256)
] + [
    Case(1, 4, 1, 1500, 6000, d, torch.bfloat16, window=2048, prompt="batch") for d in (80, 128)
] + [
    Case(1, 4, 2, 2000, 5000, d, torch.bfloat16, softcap=30.0) for d in (64, 256)
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_kernels_match_fp64_reference_on_gpu(case, poisoned, record_testsuite_property):
    errors = run_and_check(case, seed=zlib.crc32(case.id.encode()) % 1000)
    record_testsuite_property(case.id, ";".join(f"{k}={v:.3g}" for k, v in errors.items()))


@pytest.mark.parametrize(
    ("case", "parts"),
    [
        pytest.param(case, parts, id=f"{case.id}-{parts}", marks=SLOW)
        for case, parts in ((c, p) for c in (CASES[5], VARIANT_CASES[1]) for p in "248")
    ],
)
def test_t3_with_a_share_of_the_exponentials_on_fma_matches_fp64(case, parts, poisoned, monkeypatch):
    """T3 taking 1/2, 1/4 or 1/8 of its exponentials from a polynomial (FlashAttention-4's split)."""
    monkeypatch.setenv("FLASHSTATS_T3_SPLIT_EXP", parts)
    run_and_check(case, seed=11)


def test_t3_split_exp_switch_names_its_values(monkeypatch):
    from flashstats_kernels.ops.columns.fused import split_exp

    monkeypatch.setenv("FLASHSTATS_T3_SPLIT_EXP", "3")
    with pytest.raises(ValueError, match="0, 2, 4 or 8"):
        split_exp()
    monkeypatch.setenv("FLASHSTATS_T3_SPLIT_EXP", "4")
    assert split_exp() == 4


@triton.jit
def _exp2_fma_kernel(X, Y, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(Y + o, exp2_fma(tl.load(X + o)))


def test_exp2_on_fma_pipes_is_as_accurate_as_the_hardware_exponential():
    """Relative error < 5e-7 (4 ulp) down to 2^-126; 0 below it and at -inf (as the flush-to-zero ex2);
    NaN stays NaN. Includes the rounding boundaries (x = n +- 0.5) and the ends of the range."""
    gen = torch.Generator().manual_seed(0)
    x = -torch.rand(4080, generator=gen, dtype=torch.float64) * 130
    edges = [0.0, -126.0, -1e-7, -float("inf"), -0.5, -1.5, -125.5, -126.5, -126.0001, -125.9999, -0.4999999,
             -0.5000001, -127.0, -1000.0, -3.0, float("nan")]  # fmt: skip
    x = torch.cat([x, torch.tensor(edges, dtype=torch.float64)]).float()
    x[-1] = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32)  # the GPU's canonical NaN
    device = "cuda" if torch.cuda.is_available() else "cpu"
    y = torch.empty(4096, dtype=torch.float32, device=device)
    _exp2_fma_kernel[(1,)](x.to(device), y, N=4096)
    y = y.cpu().double()
    want = torch.exp2(x.double())
    nan = torch.isnan(x)
    assert torch.isnan(y[nan]).all()
    ok = (want >= 2.0**-126) & ~nan
    assert ((y - want) / want)[ok].abs().max().item() < 5e-7  # 4 ulp of fp32
    assert torch.all(y[~ok & ~nan] == 0)
