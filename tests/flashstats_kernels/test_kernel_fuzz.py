"""The kernel fuzz (benchmarks/kernel_fuzz.py): draws stay in their specialisation; a few run interpreted."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("kernel_fuzz", ROOT / "benchmarks" / "kernel_fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_fuzz"] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["kernel_fuzz"]


def _class(n: int) -> str:
    """How Triton specialises an integer argument."""
    return "one" if n == 1 else ("div16" if n % 16 == 0 else "other")


def test_draws_stay_in_their_specialisation(fuzz):
    specs = fuzz.make_specs(24)
    assert {s.dtype for s in specs} == {"float32", "float16", "bfloat16"}
    assert {s.d for s in specs} == {32, 64, 80, 128, 256}
    seen: dict[int, set] = {}
    for seed in range(2000):
        spec = specs[seed % len(specs)]
        cfg = fuzz.draw(seed, spec, 2048)
        assert 1 <= cfg.r <= cfg.seq <= 2048 and cfg.hq == cfg.hkv * spec.group
        assert (cfg.dtype, cfg.d, cfg.rows, cfg.lookups, cfg.columns) == (
            spec.dtype, spec.d, spec.rows, spec.lookups, spec.columns,
        )  # fmt: skip
        assert (cfg.pad != "none", cfg.window is not None, cfg.softcap is not None) == (
            spec.mask, spec.window, spec.softcap,
        )  # fmt: skip
        ints = (cfg.r, cfg.seq, cfg.hq, cfg.window or 2)
        seen.setdefault(spec.index, set()).add(tuple(_class(n) for n in ints))
    assert all(len(classes) == 1 for classes in seen.values())  # one compile per specialisation
    assert len({(c.r, c.seq) for c in (fuzz.draw(s, specs[0], 2048) for s in range(0, 480, 24))}) > 10


@pytest.mark.slow  # about 8 s per configuration on the interpreter (2 cores)
def test_a_few_configurations_match_fp64_interpreted(fuzz):
    specs = [s for s in fuzz.make_specs(24) if s.d <= 64 and s.dtype != "bfloat16"][:2]
    assert len(specs) == 2
    for seed, spec in enumerate(specs):
        cfg = dataclasses.replace(fuzz.draw(seed, spec, 12), b=1, hkv=1, hq=spec.group)  # few programs
        scaled, errors = fuzz.check(cfg, "cpu")
        assert scaled and max(scaled.values()) <= 1.0, (cfg, scaled)
        assert set(scaled) <= set(errors) and all(errors[f"{n}_same"] >= 0.0 for n in scaled)


def test_the_rule_fails_a_wrong_output(fuzz, monkeypatch):
    """The count applies the rule: an output off by more than twice the same-precision error fails."""
    import flashstats_kernels as fk

    spec = next(s for s in fuzz.make_specs(24) if s.d <= 64 and s.dtype == "float32")
    cfg = dataclasses.replace(fuzz.draw(3, spec, 12), b=1, hkv=1, hq=spec.group)

    def off(*args, **kwargs):  # the fp64 reference with its LSE moved by 1e-3
        result = fk.naive_response_attention(*(t.double() for t in args[:3]), **kwargs)
        result.lse = (result.lse + 1e-3).float()
        result.out = result.out.to(args[0].dtype)
        return result

    monkeypatch.setattr(fk, "response_attention", lambda *a, backend=None, **kw: off(*a, **kw))
    scaled, errors = fuzz.check(cfg, "cpu")
    assert scaled["lse"] > 1.0 and errors["lse"] >= 1e-3 * 0.99
    assert scaled["out"] <= 1.0  # the exact output (rounded to its dtype) is within the rule
