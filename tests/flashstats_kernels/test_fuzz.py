"""Seeded random configurations across every option, for each backend, against the fp64 reference.

``N_CONFIGS`` configurations per backend and run; each is reproducible from its seed (in the test id).
Shapes stay tiny because the Triton backend runs under the interpreter on CPU.
"""

import importlib.util
import random

import flashstats_kernels as fk
import pytest
import torch

N_CONFIGS = 100
HAS_TRITON_KERNELS = all(
    importlib.util.find_spec(f"flashstats_kernels.ops.{op}.fused") is not None
    for op in ("forward", "lookups", "columns")
)


def draw(seed: int) -> dict:
    rng = random.Random(seed)
    seq = rng.choice([1, 2, 3, rng.randint(4, 40), rng.randint(41, 70)])
    r = rng.choice([1, seq, rng.randint(1, seq)])
    hkv = rng.choice([1, 2])
    return dict(
        b=rng.choice([1, 2]),
        hkv=hkv,
        hq=hkv * rng.choice([1, 2, 4]) if hkv == 1 else hkv * rng.choice([1, 2]),
        r=r,
        seq=seq,
        d=rng.choice([8, 16, 64, 80, 128]),
        pad=rng.choice(["none", "none", "left", "middle", "full"]),
        softcap=rng.choice([None, None, 2.0, 20.0]),
        window=rng.choice([None, None, 1, rng.randint(1, seq + 2)]),
        per_batch=rng.random() < 0.4,
        prompt_len=None if rng.random() < 0.6 else rng.randint(0, seq),
        transposed=rng.random() < 0.3,
        dtype=rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16]),
        seed=seed,
    )


def flags(seed: int) -> dict:
    rng = random.Random(10_000 + seed)
    return dict(rows=rng.random() < 0.8, lookups=rng.random() < 0.7, columns=rng.random() < 0.6)


CONFIGS = [(seed, draw(seed)) for seed in range(N_CONFIGS)]


def config_id(item) -> str:
    seed, c = item
    dtype = str(c["dtype"]).split(".")[1]
    return f"s{seed}-B{c['b']}-R{c['r']}-L{c['seq']}-HQ{c['hq']}-H{c['hkv']}-D{c['d']}-{c['pad']}-{dtype}"


FAST_TRITON = 4
"""Interpreted Triton runs of the first configurations are in the default run; the others are slow."""


@pytest.mark.parametrize(
    ("item", "backend"),
    [
        pytest.param(
            item, backend, id=f"{config_id(item)}-{backend}",
            marks=pytest.mark.slow if backend == "triton" and item[0] >= FAST_TRITON else (),
        )
        for item in CONFIGS
        for backend in ("torch", "triton")
    ],
)  # fmt: skip
def test_fuzz_against_naive(harness, backend, item):
    if backend == "triton" and not HAS_TRITON_KERNELS:
        pytest.skip("the Triton kernels (flashstats_kernels.ops.*.fused) are not in this checkout yet")
    seed, spec = item
    inputs, kwargs, full = harness.make_case(harness.Case(**spec))
    request = fk.StatsRequest(**flags(seed), sink_positions=full.sink_positions, diag_eps=full.diag_eps)
    got = fk.response_attention(*inputs, request=request, backend=backend, **kwargs)
    harness.assert_matches(got, inputs, kwargs, request)
    if request.columns:
        again = fk.response_attention(*inputs, request=request, backend=backend, **kwargs).columns
        assert torch.equal(again.sum, got.columns.sum), "column sums differ between two runs"
