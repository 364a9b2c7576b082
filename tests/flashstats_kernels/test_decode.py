"""The decoding op (new rows against a key cache) against the fp64 reference, on both backends.

On a machine without CUDA the Triton kernels run under the interpreter. Outputs are poisoned with NaN
(every float ``torch.empty`` is NaN-filled), so an element a kernel forgets to write fails.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from flashstats_kernels import (
    ColumnState,
    RowTargets,
    StatsRequest,
    decode_attention,
    response_attention,
    response_columns,
)
from flashstats_kernels.ops.decode import naive_decode

ROW_FIELDS = ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support")
LOOKUP_FIELDS = ("diag_log", "prev_weight", "sink_weights")
TOL = dict(atol=2e-5, rtol=2e-5)
BACKENDS = ["torch", "triton"]
SLOW = pytest.mark.slow


@dataclasses.dataclass(frozen=True)
class Case:
    B: int = 1
    Hq: int = 2
    Hkv: int = 1
    R: int = 1
    Lc: int = 37  # cache capacity
    kv: int = 29  # valid keys
    D: int = 16
    pad: bool = False  # left padding (a different first real token per example)
    softcap: float | None = None
    window: int | None = None
    splits: int | None = 3
    prompt: int | None = None  # prompt length of example 0 (None: the keys before the new rows)

    @property
    def id(self) -> str:
        extra = ("-pad" if self.pad else "") + (f"-cap{self.softcap}" if self.softcap else "")
        extra += f"-win{self.window}" if self.window else ""
        extra += f"-P{self.prompt}" if self.prompt is not None else ""
        sizes = f"B{self.B}-R{self.R}-Lc{self.Lc}-kv{self.kv}-HQ{self.Hq}-H{self.Hkv}-D{self.D}"
        return f"{sizes}-S{self.splits}{extra}"


CASES = [
    Case(),
    Case(B=2, Hq=4, Hkv=2, R=5, Lc=64, kv=63, splits=2),
    Case(B=3, Hq=6, Hkv=2, R=1, Lc=111, kv=100, D=24, pad=True, splits=5),
    Case(B=2, Hq=4, Hkv=1, R=7, Lc=50, kv=50, softcap=2.0, splits=4),
    Case(B=2, Hq=2, Hkv=2, R=3, Lc=45, kv=33, window=9, pad=True, splits=3),
    Case(B=1, Hq=8, Hkv=2, R=2, Lc=20, kv=2, splits=1),  # only the new rows are cached
    Case(B=1, Hq=4, Hkv=4, R=1, Lc=80, kv=80, D=80, splits=None),
    Case(B=2, Hq=8, Hkv=1, R=9, Lc=40, kv=30, pad=True, splits=2),  # 72 rows per KV head: two row blocks
    # no key mask: unmasked interior tiles between the window's edge tile and the rows' own tiles, the
    # prompt boundary inside the interior (and, for example 1, on a tile edge)
    Case(B=2, Hq=4, Hkv=2, R=2, Lc=130, kv=121, window=50, prompt=97, splits=3),
    Case(B=2, Hq=4, Hkv=2, R=3, Lc=100, kv=97, prompt=49, splits=2),
]
FAST_TRITON = {0, 4}  # cases whose interpreted Triton runs are in the default run (the others are slow)


def runs(cases: list[Case], fast: set[int] = FAST_TRITON) -> list:
    """``(case, backend)`` pairs: every PyTorch run by default, the Triton runs of ``fast`` (else slow)."""
    return [
        pytest.param(
            case, backend, id=f"{case.id}-{backend}", marks=() if backend == "torch" or i in fast else SLOW
        )
        for i, case in enumerate(cases)
        for backend in BACKENDS
    ]


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


def _inputs(case: Case, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(case.B, case.Hq, case.R, case.D, generator=g) * 1.5
    k = torch.randn(case.B, case.Hkv, case.Lc, case.D, generator=g)
    v = torch.randn(case.B, case.Hkv, case.Lc, case.D, generator=g)
    mask = None
    first = torch.zeros(case.B, dtype=torch.int64)
    if case.pad:
        first = torch.arange(case.B) * 2 % max(1, case.kv - case.R)
        mask = torch.arange(case.Lc)[None, :] >= first[:, None]
    plen = (case.kv - case.R if case.prompt is None else case.prompt) - torch.arange(case.B)
    plen = plen.clamp(min=0)
    sinks = torch.stack([first, first + 1, torch.full_like(first, case.Lc + 3)], 1)
    opts = dict(key_mask=mask, prompt_len=plen, softcap=case.softcap, window=case.window)
    return q, k, v, opts, sinks


def _run(case: Case, backend: str, seed: int = 0, splits=None):
    q, k, v, opts, sinks = _inputs(case, seed)
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    state = ColumnState.zeros(case.B, case.Hq, case.Lc, "cpu")
    res = decode_attention(
        q, k, v, kv_len=case.kv, request=request, column_state=state, backend=backend,
        splits=splits if splits is not None else case.splits, **opts,
    )  # fmt: skip
    return res, state


@pytest.mark.parametrize(("case", "backend"), runs(CASES))
def test_decode_matches_fp64_reference(case, backend, poisoned):
    res, state = _run(case, backend)
    _assert_matches_reference(case, res, state)


@pytest.mark.parametrize(
    "case", [CASES[3], *(pytest.param(c, marks=SLOW) for c in (CASES[4], CASES[7]))], ids=lambda c: c.id
)
def test_many_rows_run_in_row_chunks_with_the_same_result(case, poisoned, monkeypatch):
    """A call whose T3 scratch scores exceed the bound runs in row chunks (here of 2 rows): same result."""
    from flashstats_kernels.ops.decode import fused

    monkeypatch.setattr(fused, "SCORE_ELEMENTS", 2 * case.B * case.Hq * case.Lc + 1)
    launches = []
    real = fused._decode_launch
    monkeypatch.setattr(
        fused, "_decode_launch", lambda q, *a, **kw: launches.append(q.shape[2]) or real(q, *a, **kw)
    )
    res, state = _run(case, "triton")
    assert launches == [2] * (case.R // 2) + [1] * (case.R % 2)
    _assert_matches_reference(case, res, state)


def _assert_matches_reference(case: Case, res, state: ColumnState) -> None:
    q, k, v, opts, sinks = _inputs(case)
    ref, col_sum, col_count = naive_decode(
        q, k, v, kv_len=case.kv, key_mask=opts["key_mask"], prompt_len=opts["prompt_len"],
        scale=case.D**-0.5, softcap=case.softcap, window=case.window, sink_positions=sinks, diag_eps=1e-30,
    )  # fmt: skip
    torch.testing.assert_close(res.out.double(), ref.out, **TOL)
    torch.testing.assert_close(res.lse.double(), ref.lse, **TOL)
    for name in ROW_FIELDS:
        torch.testing.assert_close(getattr(res.rows, name).double(), getattr(ref.rows, name), **TOL, msg=name)
    for name in LOOKUP_FIELDS:
        got, exp = getattr(res.lookups, name).double(), getattr(ref.lookups, name)
        torch.testing.assert_close(got, exp, **TOL, msg=name)
    torch.testing.assert_close(state.sum.double(), col_sum, **TOL)
    torch.testing.assert_close(state.count.double(), col_count, atol=0, rtol=0)
    assert res.columns is None


def _draw_case(seed: int) -> Case:
    """A seeded random decoding configuration: odd groups and head dims, windows, masks, soft caps."""
    rng = random.Random(seed)
    r = rng.choice([1, 1, rng.randint(2, 5), rng.randint(6, 20)])
    kv = r + rng.choice([0, rng.randint(1, 20), rng.randint(21, 90)])
    hkv = rng.choice([1, 2, 3])
    return Case(
        B=rng.choice([1, 2]), Hq=hkv * rng.choice([1, 3, 4, 5]), Hkv=hkv, R=r, Lc=kv + rng.choice([0, 3, 17]),
        kv=kv, D=rng.choice([8, 24, 64, 80]), pad=rng.random() < 0.3 and kv > r,
        softcap=rng.choice([None, None, 3.0]), window=rng.choice([None, None, 1, rng.randint(1, kv + 2)]),
        splits=rng.choice([None, 1, rng.randint(2, 9)]),
        prompt=None if rng.random() < 0.5 else rng.randint(0, kv),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("seed", "backend"),
    [pytest.param(s, b, marks=SLOW if b == "triton" else ()) for s in range(12) for b in BACKENDS],
)
def test_random_configurations_match_fp64_reference(seed, backend, poisoned):
    """Seeded random shapes and options (the case is reproducible from the seed) against fp64."""
    case = _draw_case(seed)
    res, state = _run(case, backend)
    _assert_matches_reference(case, res, state)


@pytest.mark.parametrize(
    ("case", "counts"),
    [
        pytest.param(CASES[0], (3,), id=f"{CASES[0].id}-S3"),  # the fast default
        # 19: the merge reads two chunks of 16, some splits empty
        *(
            pytest.param(c, (2, 3, 7, 19), id=c.id, marks=SLOW)
            for c in (CASES[1], CASES[3], CASES[4], CASES[8])
        ),
    ],
)
def test_split_count_changes_only_rounding_and_runs_are_bitwise(case, counts, poisoned):
    base, base_state = _run(case, "triton", splits=1)
    for splits in counts:
        res, state = _run(case, "triton", splits=splits)
        again, again_state = _run(case, "triton", splits=splits)
        for a, b in ((res.out, again.out), (res.lse, again.lse), (state.sum, again_state.sum)):
            assert torch.equal(a, b)  # bitwise across runs
        assert torch.equal(res.rows.entropy, again.rows.entropy)
        torch.testing.assert_close(res.out, base.out, atol=2e-6, rtol=2e-6)
        torch.testing.assert_close(res.rows.entropy, base.rows.entropy, atol=2e-6, rtol=2e-6)
        torch.testing.assert_close(state.sum, base_state.sum, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize(
    ("chunks", "backend"),
    [
        pytest.param(
            chunks,
            backend,
            id=f"{name}-{backend}",
            marks=SLOW if (name, backend) == ("R1-steps", "triton") else (),
        )
        for chunks, name in (((1, 1, 1, 1, 1, 1), "R1-steps"), ((4, 1, 3, 2), "chunks-4-1-3-2"))
        for backend in BACKENDS
    ],
)  # the interpreted one-row steps are slow; the chunked Triton stream stays in the default run
def test_stream_of_steps_equals_one_response_forward(chunks, backend, poisoned):
    """Rows fed chunk by chunk into a growing cache: per-row statistics and the running columns equal
    one response-stage forward over all of them (what a teacher-forced forward computes)."""
    g = torch.Generator().manual_seed(3)
    b, hq, hkv, d, prompt, cap = 2, 4, 2, 16, 17, 40
    total = prompt + sum(chunks)
    q = torch.randn(b, hq, total, d, generator=g)
    k = torch.randn(b, hkv, cap, d, generator=g)
    v = torch.randn(b, hkv, cap, d, generator=g)
    mask = torch.arange(cap)[None, :] >= torch.tensor([0, 3])[:, None]
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=torch.tensor([[0], [3]]))
    state = ColumnState.zeros(b, hq, cap, "cpu")
    parts, at = [], prompt
    for n in chunks:
        at += n
        res = decode_attention(
            q[:, :, at - n : at], k, v, kv_len=at, request=request, column_state=state, key_mask=mask,
            prompt_len=prompt, backend=backend, splits=2,
        )  # fmt: skip
        parts.append(res)
    rows = sum(chunks)
    ref = response_attention(
        q[:, :, prompt:], k[:, :, :total], v[:, :, :total], request=request, key_mask=mask[:, :total],
        prompt_len=prompt, backend="torch",
    )  # fmt: skip
    for name in ROW_FIELDS:
        got = torch.cat([getattr(p.rows, name) for p in parts], dim=2)
        torch.testing.assert_close(got, getattr(ref.rows, name), **TOL, msg=name)
    got = torch.cat([p.lookups.sink_weights for p in parts], dim=2)
    torch.testing.assert_close(got, ref.lookups.sink_weights, **TOL)
    cols = response_columns(
        q[:, :, prompt:],
        k[:, :, :total],
        ref.lse,
        key_mask=mask[:, :total],
        prompt_len=prompt,
        backend="torch",
    )
    stats = state.stats()
    torch.testing.assert_close(stats.sum[..., :total], cols.sum, **TOL)
    torch.testing.assert_close(stats.mean[..., :total], cols.mean, **TOL)
    assert not stats.sum[..., total:].any()
    assert rows == parts[-1].lse.shape[2] + sum(chunks[:-1])


@pytest.mark.parametrize(("case", "backend"), runs([CASES[3], CASES[2], CASES[7]], fast={0}))
def test_rows_written_into_target_slots_equal_the_returned_ones(case, backend, poisoned, monkeypatch):
    """RowTargets: T1 and T2 land in slots start..start+R-1 of strided layer views, nothing else changes."""
    from flashstats_kernels.ops.decode import fused

    monkeypatch.setattr(fused, "SCORE_ELEMENTS", 4 * case.B * case.Hq * case.Lc)  # row chunks too
    res, _ = _run(case, backend)
    q, k, v, opts, sinks = _inputs(case)
    a, at, layer = case.R + 9, 5, 1
    rows = torch.full((5, case.B, 3, case.Hq, a), -7.0)
    diag_prev = torch.full((2, case.B, 3, case.Hq, a), -7.0)
    sink_buf = torch.full((case.B, 3, case.Hq, a, sinks.shape[1]), -7.0)
    targets = RowTargets(
        start=torch.tensor([at]), rows=rows[:, :, layer], diag_log=diag_prev[0, :, layer],
        prev_weight=diag_prev[1, :, layer], sink_weights=sink_buf[:, layer],
    )  # fmt: skip
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    state = ColumnState.zeros(case.B, case.Hq, case.Lc, "cpu")
    got = decode_attention(
        q, k, v, kv_len=case.kv, request=request, column_state=state, backend=backend, splits=case.splits,
        targets=targets, **opts,
    )  # fmt: skip
    assert got.rows is None and got.lookups is None
    torch.testing.assert_close(got.lse, res.lse, atol=0, rtol=0)
    sl = slice(at, at + case.R)
    for i, name in enumerate(ROW_FIELDS):
        torch.testing.assert_close(rows[i, :, layer, :, sl], getattr(res.rows, name), atol=0, rtol=0)
    torch.testing.assert_close(diag_prev[0, :, layer, :, sl], res.lookups.diag_log, atol=0, rtol=0)
    torch.testing.assert_close(diag_prev[1, :, layer, :, sl], res.lookups.prev_weight, atol=0, rtol=0)
    torch.testing.assert_close(sink_buf[:, layer, :, sl], res.lookups.sink_weights, atol=0, rtol=0)
    for buf in (rows, diag_prev, sink_buf.movedim(-1, 0)):  # every other slot untouched
        written = torch.zeros(buf.shape, dtype=torch.bool)
        written[..., layer, :, sl] = True
        assert (buf[~written] == -7.0).all()
    shape = rf"\[{case.B}, {case.Hq}, 'A', 'S'\]"
    with pytest.raises(ValueError, match=rf"targets.sink_weights must be a float32 tensor {shape}"):
        decode_attention(
            q, k, v, kv_len=case.kv, request=request, column_state=state, backend=backend,
            targets=dataclasses.replace(targets, sink_weights=None), **opts,
        )  # fmt: skip
    with pytest.raises(TypeError, match=r"targets.start must be a \[1\] int64 tensor"):
        decode_attention(
            q, k, v, kv_len=case.kv, backend=backend, targets=dataclasses.replace(targets, start=at)
        )


def test_device_tensor_kv_len_needs_prompt_len():
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 1, 9, 8), torch.randn(1, 1, 9, 8)
    res = decode_attention(q, k, v, kv_len=torch.tensor(5), prompt_len=3, backend="torch")
    ref = decode_attention(q, k, v, kv_len=5, prompt_len=3, backend="torch")
    assert torch.equal(res.out, ref.out)
    with pytest.raises(ValueError, match=r"kv_len must lie in \[R, Lc\] = \[1, 9\]"):
        decode_attention(q, k, v, kv_len=10, backend="torch")
    with pytest.raises(TypeError, match="kv_len tensor must hold one integer"):
        decode_attention(q, k, v, kv_len=torch.tensor([2.0]), backend="torch")
    with pytest.raises(TypeError, match=r"request.columns needs column_state=ColumnState.zeros\(1, 2, 9"):
        decode_attention(q, k, v, kv_len=5, request=StatsRequest(columns=True), backend="torch")
    with pytest.raises(ValueError, match="column_state must have sum"):
        decode_attention(
            q,
            k,
            v,
            kv_len=5,
            request=StatsRequest(columns=True),
            column_state=ColumnState.zeros(1, 2, 8, "cpu"),
        )
    with pytest.raises(ValueError, match="splits must be None or a positive int"):
        decode_attention(q, k, v, kv_len=5, splits=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "case",
    [
        Case(B=2, Hq=8, Hkv=2, R=1, Lc=4100, kv=4097, D=128, pad=True, splits=None),
        Case(B=1, Hq=4, Hkv=1, R=16, Lc=1000, kv=999, D=64, window=300, splits=7),
        Case(B=2, Hq=4, Hkv=4, R=3, Lc=777, kv=700, D=256, softcap=30.0, splits=None),
    ],
    ids=lambda c: c.id,
)
def test_decode_cuda_matches_fp64_reference(case, dtype):
    """The split-K kernels on the GPU against the fp64 reference of the same (rounded) inputs."""
    q, k, v, opts, sinks = _inputs(case)
    q, k, v = (x.to(dtype).cuda() for x in (q, k, v))
    mask = None if opts["key_mask"] is None else opts["key_mask"].cuda()
    plen, sinks = opts["prompt_len"].cuda(), sinks.cuda()
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks)
    state = ColumnState.zeros(case.B, case.Hq, case.Lc, "cuda")
    kv_len = torch.tensor([case.kv], device="cuda")
    res = decode_attention(
        q, k, v, kv_len=kv_len, request=request, column_state=state, key_mask=mask, prompt_len=plen,
        softcap=case.softcap, window=case.window, splits=case.splits, backend="triton",
    )  # fmt: skip
    ref, col_sum, col_count = naive_decode(
        q.cpu(), k.cpu(), v.cpu(), kv_len=case.kv, key_mask=opts["key_mask"],
        prompt_len=opts["prompt_len"], scale=case.D**-0.5, softcap=case.softcap, window=case.window,
        sink_positions=sinks.cpu(), diag_eps=1e-30,
    )  # fmt: skip
    for name in ROW_FIELDS:
        got = getattr(res.rows, name).cpu().double()
        torch.testing.assert_close(got, getattr(ref.rows, name), atol=1e-4, rtol=1e-4, msg=name)
    for name in LOOKUP_FIELDS:
        got = getattr(res.lookups, name).cpu().double()
        torch.testing.assert_close(got, getattr(ref.lookups, name), atol=1e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(res.lse.cpu().double(), ref.lse, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state.sum.cpu().double(), col_sum, atol=1e-4, rtol=1e-4)
    assert torch.equal(state.count.cpu().double(), col_count)
    out_tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(res.out.cpu().double(), ref.out, atol=out_tol, rtol=out_tol)
    fresh = ColumnState.zeros(case.B, case.Hq, case.Lc, "cuda")
    again = decode_attention(
        q, k, v, kv_len=kv_len, request=request, column_state=fresh, key_mask=mask, prompt_len=plen,
        softcap=case.softcap, window=case.window, splits=case.splits,
    )  # fmt: skip
    assert torch.equal(again.out, res.out) and torch.equal(again.rows.entropy, res.rows.entropy)  # bitwise


def test_merge_split_block_fits_registers_and_the_split_count():
    from flashstats_kernels.ops.decode.fused import merge_split_block

    assert merge_split_block(64, 4, 16) == 64  # SmolLM2 decode (3 rows per KV head): all 64 splits at once
    assert merge_split_block(64, 4, 32) == 64  # Llama 8B / Qwen3 decode: 4 x 32 columns, 8K values
    assert merge_split_block(33, 16, 32) == 16  # 16-row chunks: 16 x 16 x 32 partial outputs
    assert merge_split_block(3, 16, 64) == 4  # never wider than the split count needs
    assert merge_split_block(1, 16, 64) == 1
    assert merge_split_block(64, 64, 256) == 1  # a block wider than the budget still merges one split


@pytest.mark.parametrize("block_d", [32, 64, 128, 256])
@pytest.mark.parametrize("group_rows", [1, 3, 4, 16, 48, 72, 1000])
def test_merge_blocks_tile_the_split_row_blocks(block_d, group_rows):
    """A merge program's rows lie in one row block of the split kernel; its columns tile the head dim."""
    from flashstats_kernels.ops.decode.fused import decode_config

    cfg = decode_config(block_d, group_rows)
    assert cfg["BLOCK_M"] % cfg["MERGE_M"] == 0 and cfg["MERGE_M"] >= min(16, group_rows)
    assert block_d % cfg["MERGE_D"] == 0 and block_d // cfg["MERGE_D"] <= 4


@pytest.mark.parametrize(
    "case",
    [CASES[4], *(pytest.param(c, marks=SLOW) for c in (CASES[0], CASES[1], CASES[2], CASES[8]))],
    ids=lambda c: c.id,
)
def test_columns_inside_the_merge_launch_equal_their_own_launch(case, poisoned, monkeypatch):
    """T3 run by the merge's launch (LSE merged again per column program) or by a launch of its own."""
    from flashstats_kernels.ops.decode import fused

    class Counted:
        def __init__(self, kernel):
            self.kernel, self.launches = kernel, 0

        def __getitem__(self, grid):
            self.launches += 1
            return self.kernel[grid]

    results = {}
    for fuse_rows in (0, 64):  # never inside the merge's launch / always
        monkeypatch.setattr(fused, "FUSE_COLUMNS_ROWS", fuse_rows)
        counted = Counted(fused._columns_kernel)
        monkeypatch.setattr(fused, "_columns_kernel", counted)
        res, state = _run(case, "triton")
        _assert_matches_reference(case, res, state)
        assert counted.launches == (1 if fuse_rows == 0 else 0)
        again, again_state = _run(case, "triton")
        assert torch.equal(state.sum, again_state.sum) and torch.equal(state.count, again_state.count)
        results[fuse_rows] = state
    torch.testing.assert_close(results[0].sum, results[64].sum, atol=2e-6, rtol=2e-6)
    assert torch.equal(results[0].count, results[64].count)


def test_column_block_grows_with_the_column_work_and_stays_bounded():
    from flashstats_kernels.ops.decode.fused import column_block

    assert column_block(8220, 9, 512) == 512  # SmolLM2 at 8K: 17 x 9 programs
    assert column_block(32796, 9, 512) == 1024
    assert column_block(32796, 32, 512) == 2048  # Llama 8B at 32K: 17 x 32 programs
    assert column_block(1 << 20, 64, 512) == 2048  # at most 4x the configured block
    assert column_block(40, 2, 16) == 16  # never below it
