"""Packed (varlen) response attention against the fp64 reference, sequence by sequence.

Each case packs sequences of odd sizes (empty ones, one-token ones, ``R = L``) on one token axis; every
statistic of sequence ``b`` must equal the fp64 naive reference of a dense call on that sequence alone,
and ``out`` must match the dense kernel on the same sequence. Outputs are poisoned with NaN, so a row
the kernels forget fails. On a machine without CUDA the kernels run under Triton's interpreter.
"""

from __future__ import annotations

import dataclasses
import math

import flashstats_kernels as fk
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
STAT_TOL = {"atol": 3e-5, "rtol": 3e-5}
OUT_TOL = {
    torch.float64: {"atol": 1e-12, "rtol": 1e-12},
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}
DIAG_EPS = 1e-20


@dataclasses.dataclass(frozen=True)
class VCase:
    """Sequences ``(R_b, L_b)`` packed one after another, and the options of the call."""

    seqs: tuple[tuple[int, int], ...]
    Hq: int = 4
    Hkv: int = 2
    D: int = 16
    dtype: torch.dtype = torch.float32
    backend: str = "triton"
    pad: bool = False  # a key mask with holes inside the sequences
    softcap: float | None = None
    window: int | None = None
    prompt: str = "default"  # default (L_b - R_b) | seq (one per sequence)
    gaps: bool = False  # seqused_q / seqused_k leave unused rows and keys between the sequences
    strided: bool = False  # q, k, v as non-contiguous views

    @property
    def id(self) -> str:
        seqs = "_".join(f"{r}x{n}" for r, n in self.seqs)
        dt = str(self.dtype).removeprefix("torch.")
        flags = [f for f, on in (("pad", self.pad), ("gaps", self.gaps), ("strided", self.strided)) if on]
        flags += [f"cap{self.softcap}"] if self.softcap else []
        flags += [f"win{self.window}"] if self.window else []
        return "-".join([self.backend, seqs, f"HQ{self.Hq}-H{self.Hkv}-D{self.D}", dt, self.prompt, *flags])


CASES = [
    VCase(((3, 7), (1, 1), (0, 4), (5, 9))),
    VCase(((1, 1),), Hq=2, Hkv=1, D=64),
    VCase(((37, 111), (2, 63), (63, 63)), D=80, pad=True, prompt="seq"),
    VCase(((20, 70), (0, 0), (9, 33)), softcap=5.0, window=16, gaps=True, strided=True),
    VCase(((11, 40), (30, 30), (4, 90)), Hq=2, Hkv=2, window=7, pad=True, prompt="seq", gaps=True),
    VCase(((13, 50), (6, 17)), D=64, dtype=torch.bfloat16, pad=True, softcap=30.0),
    VCase(((3, 7), (1, 1), (0, 4), (5, 9)), dtype=torch.float64, backend="torch"),
    VCase(
        ((37, 111), (2, 63)),
        D=80,
        dtype=torch.float64,
        backend="torch",
        pad=True,
        prompt="seq",
        gaps=True,
        softcap=5.0,
        window=16,
        strided=True,
    ),  # fmt: skip
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


def make_packed(case: VCase, seed: int) -> dict:
    """Per-sequence inputs (fp64 values exactly representable in the case's dtype) and their packing."""
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for r, n in case.seqs:
        x = {
            name: (torch.randn(t, h, case.D, generator=gen) * 1.5).to(case.dtype).double()
            for name, t, h in (("q", r, case.Hq), ("k", n, case.Hkv), ("v", n, case.Hkv))
        }
        x["mask"] = torch.rand(n, generator=gen) > (0.3 if case.pad else -1.0)
        x["prompt"] = int(torch.randint(0, n + 1, (1,), generator=gen)) if case.prompt == "seq" else n - r
        x["sinks"] = [0, n // 2, n, -1]
        seqs.append(x)
    extra = 3 if case.gaps else 0  # unused rows / keys after each sequence

    def pack(name: str, heads: int) -> torch.Tensor:
        parts = []
        for x in seqs:
            parts += [x[name], torch.randn(extra, heads, case.D, generator=gen, dtype=torch.float64)]
        packed = torch.cat(parts).to(case.dtype)
        if case.strided:  # a [T, H, D] view of a [H, T, 2 D] buffer
            buf = torch.zeros(heads, packed.shape[0], 2 * case.D, dtype=case.dtype)
            buf[..., : case.D] = packed.transpose(0, 1)
            packed = buf[..., : case.D].transpose(0, 1)
        return packed.to(DEVICE)

    def offsets(lengths: list[int]) -> torch.Tensor:
        return torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32)

    rows, keys = [r for r, _ in case.seqs], [n for _, n in case.seqs]
    masks = [torch.cat([x["mask"], torch.ones(extra, dtype=torch.bool)]) for x in seqs]
    return {
        "seqs": seqs,
        "q": pack("q", case.Hq),
        "k": pack("k", case.Hkv),
        "v": pack("v", case.Hkv),
        "cu_q": offsets([r + extra for r in rows]),
        "cu_k": offsets([n + extra for n in keys]),
        "used": (torch.tensor(rows), torch.tensor(keys)) if case.gaps else (None, None),
        "max": (max(rows) + extra, max(keys) + extra),
        "key_mask": torch.cat(masks).to(DEVICE) if case.pad else None,
        "prompt_len": torch.tensor([x["prompt"] for x in seqs]).to(DEVICE) if case.prompt == "seq" else None,
        "sinks": torch.tensor([x["sinks"] for x in seqs]).to(DEVICE),
    }


def run_varlen(case: VCase, x: dict) -> fk.AttentionResult:
    request = fk.StatsRequest(
        rows=True, lookups=True, columns=True, sink_positions=x["sinks"], diag_eps=DIAG_EPS
    )
    return fk.response_attention_varlen(
        x["q"], x["k"], x["v"], x["cu_q"], x["cu_k"], *x["max"], seqused_q=x["used"][0],
        seqused_k=x["used"][1], request=request, key_mask=x["key_mask"], prompt_len=x["prompt_len"],
        softcap=case.softcap, window=case.window, backend=case.backend,
    )  # fmt: skip


def fields(result: fk.AttentionResult) -> dict[str, torch.Tensor]:
    named = {"lse": result.lse}
    for part in (result.rows, result.lookups, result.columns):
        named.update(
            {f"{type(part).__name__}.{f.name}": getattr(part, f.name) for f in dataclasses.fields(part)}
        )
    return named


def dense_kwargs(case: VCase, x: dict) -> tuple[tuple[torch.Tensor, ...], dict, fk.StatsRequest]:
    """Inputs of the dense call on one sequence alone: [1, H, T, D] tensors and options."""
    inputs = tuple(x[n].transpose(0, 1)[None].to(DEVICE) for n in ("q", "k", "v"))
    kwargs = {
        "key_mask": x["mask"][None].to(DEVICE) if case.pad else None,
        "prompt_len": x["prompt"],
        "softcap": case.softcap,
        "window": case.window,
    }
    sinks = torch.tensor([x["sinks"]], device=DEVICE)
    return inputs, kwargs, fk.StatsRequest(True, True, True, sink_positions=sinks, diag_eps=DIAG_EPS)


def check_case(case: VCase, seed: int) -> None:
    x = make_packed(case, seed)
    got = run_varlen(case, x)
    tq, tk = x["q"].shape[0], x["k"].shape[0]
    assert got.out.shape == x["q"].shape and got.out.dtype == case.dtype
    for name, t in fields(got).items():
        assert t.dtype == torch.float32, name
        assert t.shape[:2] == (case.Hq, tk if name.startswith("ColumnStats") else tq), name
        assert not torch.isnan(t).any(), name
    rows_seen, keys_seen = torch.zeros(tq, dtype=torch.bool), torch.zeros(tk, dtype=torch.bool)
    for b, seq in enumerate(x["seqs"]):
        q0, k0 = int(x["cu_q"][b]), int(x["cu_k"][b])
        r, n = case.seqs[b]
        rows_seen[q0 : q0 + r] = True
        keys_seen[k0 : k0 + n] = True
        if r == 0:
            continue
        inputs, kwargs, request = dense_kwargs(case, seq)
        ref = fields(fk.naive_response_attention(*inputs, request=request, **kwargs))
        for name, t in fields(got).items():
            sl = slice(k0, k0 + n) if name.startswith("ColumnStats") else slice(q0, q0 + r)
            torch.testing.assert_close(
                t[:, sl].double(), ref[name][0], **STAT_TOL, msg=lambda m, n=name, b=b: f"{b} {n}: {m}"
            )
        dense = fk.response_attention(
            *(i.to(case.dtype) for i in inputs), request=request, **kwargs, backend=case.backend
        )
        torch.testing.assert_close(got.out[q0 : q0 + r], dense.out[0].transpose(0, 1), **OUT_TOL[case.dtype])
        ref_out = fk.naive_response_attention(*inputs, request=fk.StatsRequest(rows=False), **kwargs).out
        torch.testing.assert_close(
            got.out[q0 : q0 + r].double(), ref_out[0].transpose(0, 1), **OUT_TOL[case.dtype]
        )
    check_uncovered(got, ~rows_seen, ~keys_seen)


def check_uncovered(got: fk.AttentionResult, rows: torch.Tensor, keys: torch.Tensor) -> None:
    """Rows and keys of no sequence read as rows without keys: out 0, lse -inf, statistics 0."""
    rows, keys = rows.to(got.lse.device), keys.to(got.lse.device)
    assert (got.out[rows] == 0).all()
    assert (got.lse[:, rows] == float("-inf")).all()
    for name, t in fields(got).items():
        if name.startswith("ColumnStats"):
            assert (t[:, keys] == 0).all(), name
        elif name == "LookupStats.diag_log":
            assert torch.allclose(t[:, rows], torch.tensor(math.log(DIAG_EPS), device=t.device)), name
        elif name != "lse":
            assert (t[:, rows] == 0).all(), name


@pytest.mark.parametrize(
    "case",
    [c if i not in (0, 2, 4, 5) else pytest.param(c, marks=pytest.mark.slow) for i, c in enumerate(CASES)],
    ids=lambda c: c.id,
)
def test_varlen_equals_each_sequence_alone(case, poisoned):
    check_case(case, seed=len(case.id))


def test_varlen_defaults_match_the_first_key_as_sink():
    """Tuple sink positions count from each sequence's first key; prompt_len defaults to L_b - R_b."""
    case = VCase(((4, 9), (2, 5)), backend="triton")
    x = make_packed(case, 3)
    got = fk.response_attention_varlen(
        x["q"], x["k"], x["v"], x["cu_q"], x["cu_k"], *x["max"],
        request=fk.StatsRequest(rows=True, lookups=True, sink_positions=(0,)),
    )  # fmt: skip
    for b, seq in enumerate(x["seqs"]):
        inputs, _, _ = dense_kwargs(case, seq)
        ref = fk.naive_response_attention(*inputs, request=fk.StatsRequest(rows=True, lookups=True))
        q0, r = int(x["cu_q"][b]), case.seqs[b][0]
        torch.testing.assert_close(
            got.lookups.sink_weights[:, q0 : q0 + r].double(), ref.lookups.sink_weights[0], **STAT_TOL
        )
        torch.testing.assert_close(
            got.rows.prompt_mass[:, q0 : q0 + r].double(), ref.rows.prompt_mass[0], **STAT_TOL
        )


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("where", ["host", pytest.param("device", marks=pytest.mark.gpu)])
def test_rows_and_keys_no_sequence_covers_read_as_empty(backend, where, poisoned):
    """Offsets that leave the first and last row and key to no sequence: those read as rows without keys."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(7, 2, 16, generator=gen).to(DEVICE) for _ in range(3))
    cu = torch.tensor(
        [1, 2, 5, 6], device="cpu" if where == "host" else DEVICE
    )  # rows and keys 0, 6 uncovered
    request = fk.StatsRequest(True, True, True, sink_positions=(0,), diag_eps=DIAG_EPS)
    got = fk.response_attention_varlen(q, k, v, cu, cu, 3, 3, request=request, backend=backend)
    for name, t in fields(got).items():
        assert not torch.isnan(t).any(), name
    edge = torch.tensor([True, False, False, False, False, False, True])
    check_uncovered(got, edge, edge)
    want = fk.response_attention_varlen(q, k, v, cu.cpu(), cu.cpu(), 3, 3, request=request, backend="torch")
    for name, t in fields(want).items():
        torch.testing.assert_close(fields(got)[name], t, **STAT_TOL, msg=name)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"cu_seqlens_q": torch.tensor([0, 3, 2], dtype=torch.int32)}, ValueError, "non-decreasing"),
        ({"cu_seqlens_q": torch.tensor([0.0, 3.0, 4.0])}, TypeError, "int32 or int64"),
        ({"cu_seqlens_k": torch.tensor([0, 7], dtype=torch.int32)}, ValueError, r"shape \[N\] = \[3\]"),
        ({"cu_seqlens_k": torch.tensor([0, 2, 9], dtype=torch.int32)}, ValueError, "R_b <= L_b"),
        ({"max_seqlen_q": 2}, ValueError, "must bound"),
        ({"max_seqlen_k": -1}, TypeError, "int >= 0"),
        ({"key_mask": torch.ones(3, dtype=torch.bool)}, ValueError, r"\[TK\]"),
        ({"prompt_len": torch.tensor([1])}, ValueError, r"\[N\] = \[2\]"),
        ({"q": torch.randn(4, 4, 16)[None]}, ValueError, r"\[TQ, Hq, D\]"),
        ({"seqused_q": torch.tensor([4, 1])}, ValueError, "seqused_q"),
    ],
)
def test_varlen_rejects_bad_input(change, error, match):
    args = {
        "q": torch.randn(4, 4, 16),
        "k": torch.randn(9, 2, 16),
        "v": torch.randn(9, 2, 16),
        "cu_seqlens_q": torch.tensor([0, 3, 4], dtype=torch.int32),
        "cu_seqlens_k": torch.tensor([0, 4, 9], dtype=torch.int32),
        "max_seqlen_q": 3,
        "max_seqlen_k": 5,
    }
    args.update(change)
    extra = {n: args.pop(n) for n in ("key_mask", "prompt_len", "seqused_q") if n in args}
    with pytest.raises(error, match=match):
        fk.response_attention_varlen(*args.values(), backend="torch", **extra)
