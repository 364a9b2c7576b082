"""Fuzz the Triton kernels against the fp64 reference on random configurations.

Every configuration draws its runtime values (batch, KV heads, lengths, window, soft cap, scale,
prompt lengths, masks, sink positions, values) from its own seed, *within* one of a fixed list of
compile-time specialisations (`SPECS`: dtype x head dim x GQA group x mask/window/soft-cap flags x
statistic families x size class). Runtime sizes stay runtime arguments: they are drawn inside a size
class that Triton specialises the same way (integer arguments are specialised on being 1 and on
divisibility by 16), so each specialisation compiles once and every further configuration reuses it.
Tile configurations are pinned (``FLASHSTATS_CONFIG_INDEX``, candidate 0 unless set, as the GPU tests
do) so no configuration pays for autotuning. The Triton backend's every output is compared with
``naive_response_attention`` in float64 under one rule (`RULE`, FlashAttention's convention): its error
is at most 8 times the error of the same computation done in the precision of that output, plus a floor
of four epsilons at the output's scale. The worst error per statistic, its seed, and every
configuration's row go to ``kernel_fuzz_<device>.csv`` and a summary to ``kernel_fuzz_<device>.md``
(date, device, torch and triton versions, configurations reached, time spent compiling).

On the GPU::

    PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:) python3 benchmarks/kernel_fuzz.py --n 500

On a CPU (Triton's interpreter, a smoke run)::

    TRITON_INTERPRET=1 uv run python benchmarks/kernel_fuzz.py --n 5 --out-dir /tmp/fuzz

The exit status is 1 when any configuration breaks the rule (listed in the summary).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MULTIPLE = 8.0
"""The rule's multiple of the error of the same computation in the output's precision. FlashAttention's
tests use 2 for its output; our statistics also pass through log2-domain conversions of the LSE and a
recomputed score (T2, T3), which cost up to about 6x the materialised fp32 error in a pilot of 24
configurations on the interpreter, so the rule allows 8x."""
FLOOR_EPS = 4.0
"""The rule's absolute floor, in units of the output dtype's epsilon at the output's largest magnitude."""
RULE = (
    "for every output tensor, max |ours - fp64| <= 8 x max |same - fp64| "
    "+ 4 eps(dtype) x max(1, max |fp64|), "
    "where `same` is the reference computation (materialised scores, softmax, weighted sum and statistics) "
    "run in the precision the kernel returns that output in: `out` in the input dtype (FlashAttention's "
    "convention), the LSE and every statistic in float32 (they are float32 outputs of exactly upcast "
    "inputs), and eps(dtype) is that dtype's machine epsilon; non-finite values must match fp64 exactly"
)
"""The one tolerance rule every configuration is checked against (also printed in the summary)."""
SIZE_KINDS = ("odd", "odd", "odd", "aligned", "one_row")
"""Size classes: ``odd`` lengths (neither 1 nor a multiple of 16), ``aligned`` (multiples of 16),
``one_row`` (``R = 1``, odd ``L``)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """One compile-time specialisation: what the kernels take as constants or specialise on."""

    index: int
    dtype: str
    d: int
    group: int
    mask: bool
    window: bool
    softcap: bool
    rows: bool
    lookups: bool
    columns: bool
    sizes: str


def make_specs(n: int, seed: int = 12345) -> list[Spec]:
    """``n`` specialisations drawn once (every dtype and head dim appears when ``n >= 15``)."""
    rng = random.Random(seed)
    dims = (64, 128, 80, 256, 32)
    out = []
    for i in range(n):
        rows, lookups = rng.random() < 0.85, rng.random() < 0.7
        out.append(
            Spec(
                index=i,
                dtype=str(DTYPES[i % len(DTYPES)]).removeprefix("torch."),
                d=dims[(i // len(DTYPES)) % len(dims)],
                group=rng.choice([1, 2, 3, 4]),
                mask=rng.random() < 0.5,
                window=rng.random() < 0.35,
                softcap=rng.random() < 0.3,
                rows=rows,
                lookups=lookups,
                columns=rng.random() < 0.6 or not (rows or lookups),
                sizes=SIZE_KINDS[i % len(SIZE_KINDS)],
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class Config:
    """One drawn configuration (everything needed to rebuild its inputs from ``seed``)."""

    seed: int
    spec: int
    b: int
    hq: int
    hkv: int
    r: int
    seq: int
    d: int
    dtype: str
    pad: str
    window: int | None
    softcap: float | None
    scale: float | None
    prompt_len: int | None
    per_batch: bool
    amplitude: float
    rows: bool
    lookups: bool
    columns: bool


def _odd(rng: random.Random, lo: int, hi: int) -> int:
    """A value in ``[lo, hi]`` that is neither 1 nor a multiple of 16 (one specialisation class)."""
    while True:
        n = rng.randint(max(lo, 2), max(hi, 3))
        if n % 16:
            return n


def _sizes(rng: random.Random, kind: str, max_len: int) -> tuple[int, int]:
    """``(R, L)`` of one size class, ``R <= L``."""
    if kind == "aligned":
        seq = 16 * rng.randint(1, max(1, max_len // 16))
        return 16 * rng.randint(1, seq // 16), seq
    seq = _odd(rng, 3, rng.choice([40, max_len]))
    if kind == "one_row":
        return 1, seq
    return rng.choice([seq, _odd(rng, 2, min(seq, 70)), _odd(rng, 2, seq)]), seq


def draw(seed: int, spec: Spec, max_len: int) -> Config:
    """A random configuration of specialisation ``spec``; lengths up to ``max_len``."""
    rng = random.Random(seed)
    r, seq = _sizes(rng, spec.sizes, max_len)
    while True:  # query heads: one class too (neither 1 nor a multiple of 16)
        hkv = rng.choice([1, 2, 3, 5])
        if (hkv * spec.group) % 16 and hkv * spec.group > 1:
            break
    window = None
    if spec.window:
        window = _odd(rng, 2, seq + 2) if spec.sizes != "aligned" else 16 * rng.randint(1, seq // 16 + 1)
    return Config(
        seed=seed,
        spec=spec.index,
        b=rng.choice([1, 2, 3]),
        hq=hkv * spec.group,
        hkv=hkv,
        r=r,
        seq=seq,
        d=spec.d,
        dtype=spec.dtype,
        pad=rng.choice(["left", "middle", "full", "left"]) if spec.mask else "none",
        window=window,
        softcap=rng.choice([2.0, 30.0, rng.uniform(0.5, 50.0)]) if spec.softcap else None,
        scale=rng.choice([None, None, 0.05, 1.0, 0.0, -0.3, rng.uniform(-1.0, 1.0)]),
        prompt_len=None if rng.random() < 0.5 else rng.randint(0, seq),
        per_batch=rng.random() < 0.4,
        amplitude=rng.choice([0.5, 1.5, 3.0]),
        rows=spec.rows,
        lookups=spec.lookups,
        columns=spec.columns,
    )


def inputs(cfg: Config, device: str):
    """``(q, k, v), kwargs, request`` of a configuration, on ``device``."""
    import flashstats_kernels as fk

    gen = torch.Generator().manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    q = (torch.randn(cfg.b, cfg.hq, cfg.r, cfg.d, generator=gen) * cfg.amplitude).to(dtype)
    k = torch.randn(cfg.b, cfg.hkv, cfg.seq, cfg.d, generator=gen).to(dtype)
    v = torch.randn(cfg.b, cfg.hkv, cfg.seq, cfg.d, generator=gen).to(dtype)
    kw: dict = {"window": cfg.window, "softcap": cfg.softcap, "scale": cfg.scale}
    if cfg.pad != "none":
        mask = torch.ones(cfg.b, cfg.seq, dtype=torch.bool)
        cut = max(1, cfg.seq // 3)
        if cfg.pad == "left":
            mask[:, :cut] = False
        elif cfg.pad == "middle":
            mask[:, cut : 2 * cut] = False
        else:
            mask[0] = False
        kw["key_mask"] = mask.to(device)
    if cfg.per_batch:
        kw["prompt_len"] = torch.randint(0, cfg.seq + 1, (cfg.b,), generator=gen).to(device)
        sinks = torch.randint(-1, cfg.seq + 1, (cfg.b, 3), generator=gen).to(device)
    else:
        kw["prompt_len"] = cfg.prompt_len
        sinks = (0, cfg.seq // 2, cfg.seq - 1)
    request = fk.StatsRequest(
        rows=cfg.rows, lookups=cfg.lookups, columns=cfg.columns, sink_positions=sinks, diag_eps=1e-20
    )
    return tuple(t.to(device) for t in (q, k, v)), kw, request


def _named(result) -> dict[str, torch.Tensor]:
    named = {"out": result.out, "lse": result.lse}
    for part in (result.rows, result.lookups, result.columns):
        if part is not None:
            named.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    return named


def same_precision(q, k, v, kw: dict, request, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The reference computation of every output run in ``dtype`` (the rule's ``same``).

    Scores, LSE, weights and the weighted sum are materialised in ``dtype`` (``torch.einsum`` accumulates
    as the framework does for that dtype), then the statistics follow from those weights with the
    readable reference's own formulas, in ``dtype`` too.
    """
    from flashstats_kernels._problem import check_problem, normalize_sink_positions
    from flashstats_kernels.ops.columns.naive import naive_columns_from_probs
    from flashstats_kernels.ops.forward.naive import naive_row_stats, naive_visibility
    from flashstats_kernels.ops.lookups.naive import naive_lookups_from_probs

    pb = check_problem(q, k, v, key_mask=kw.get("key_mask"), prompt_len=kw["prompt_len"], scale=kw["scale"],
                       softcap=kw["softcap"], window=kw["window"])  # fmt: skip
    qd, kd, vd = (t.to(dtype) for t in (q, k, v))
    s = torch.einsum("bhrd,bhld->bhrl", qd, kd.repeat_interleave(pb.group, dim=1)) * pb.scale
    if pb.softcap is not None:
        s = pb.softcap * torch.tanh(s / pb.softcap)
    visible = naive_visibility(pb.batch, pb.rows, pb.keys, key_mask=pb.key_mask, window=pb.window,
                               device=q.device)  # fmt: skip
    masked = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(masked, dim=-1)
    weighted = visible & (lse != float("-inf"))[..., None]
    p = torch.where(weighted, torch.exp(masked - lse[..., None]), torch.zeros_like(s))
    named = {"out": torch.einsum("bhrl,bhld->bhrd", p, vd.repeat_interleave(pb.group, dim=1)), "lse": lse}
    parts = []
    if request.rows:
        parts.append(naive_row_stats(p, s, lse, visible, pb.prompt_len))
    if request.lookups:
        sinks = normalize_sink_positions(request.sink_positions, pb.batch, q.device)
        parts.append(naive_lookups_from_probs(p, s, lse, visible, prompt_len=pb.prompt_len,
                                              sink_positions=sinks, diag_eps=request.diag_eps))  # fmt: skip
    if request.columns:
        parts.append(naive_columns_from_probs(p, visible, key_mask=pb.key_mask, prompt_len=pb.prompt_len))
    for part in parts:
        named.update({f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    return named


def _max_error(have: torch.Tensor, want: torch.Tensor, fin: torch.Tensor) -> float:
    """``max |have - want|`` over ``fin`` (float64; NaN counts as infinite)."""
    if not bool(fin.any()):
        return 0.0
    return float(torch.nan_to_num((have.double() - want)[fin].abs(), nan=float("inf")).max())


def check(cfg: Config, device: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(scaled errors, errors)`` of one configuration under `RULE`, per output.

    A scaled error is ``max |ours - fp64| / (MULTIPLE * max |same - fp64| + floor)``: 1.0 is at the
    rule's bound, above it the configuration fails; ``inf`` when non-finite values differ from fp64.
    ``errors`` holds ``max |ours - fp64|`` and ``max |same - fp64|`` (keys ``<name>`` and ``<name>_same``).
    """
    import flashstats_kernels as fk

    (q, k, v), kw, request = inputs(cfg, device)
    got = _named(fk.response_attention(q, k, v, request=request, backend="triton", **kw))
    ref = _named(fk.naive_response_attention(q.double(), k.double(), v.double(), request=request, **kw))
    same = {"out": same_precision(q, k, v, kw, request, q.dtype)["out"]}
    same.update({n: t for n, t in same_precision(q, k, v, kw, request, torch.float32).items() if n != "out"})
    scaled: dict[str, float] = {}
    errors: dict[str, float] = {}
    for name, want in ref.items():
        have = got[name]
        if not torch.equal(torch.isnan(have), torch.isnan(want)):
            scaled[name] = float("inf")  # a NaN where the reference has none, or the reverse
            continue
        fin = torch.isfinite(want) & torch.isfinite(have)
        if not torch.equal(have[~fin].double().nan_to_num(0.0), want[~fin].nan_to_num(0.0)):
            scaled[name] = float("inf")  # infinities differ
            continue
        ours, theirs = _max_error(have, want, fin), _max_error(same[name], want, fin)
        top = float(want[fin].abs().max()) if bool(fin.any()) else 0.0
        floor = FLOOR_EPS * torch.finfo(have.dtype).eps * max(1.0, top)
        scaled[name] = ours / (MULTIPLE * theirs + floor)
        errors[name], errors[f"{name}_same"] = ours, theirs
    return scaled, errors


def _versions(device: str) -> str:
    import triton

    name = (
        torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'interpreter'})"
    )
    return (
        f"{name}, torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}"
    )


def run(
    n: int, seed0: int, max_len: int, budget_s: float, device: str, specs: list[Spec]
) -> tuple[list[dict], float]:
    """Configurations from ``seed0`` (specialisation ``seed % len(specs)``) until ``n`` or the budget."""
    rows, start, seen = [], time.perf_counter(), set()
    for seed in range(seed0, seed0 + n):
        if time.perf_counter() - start > budget_s:
            break
        cfg = draw(seed, specs[seed % len(specs)], max_len)
        first, _ = cfg.spec not in seen, seen.add(cfg.spec)
        t0 = time.perf_counter()
        try:
            errs, absolute = check(cfg, device)
            error = ""
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, recorded with its seed
            errs, absolute = {}, {}
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        worst = max(errs.values(), default=float("inf") if error else 0.0)
        rows.append({**dataclasses.asdict(cfg), **{f"err_{k}": v for k, v in errs.items()},
                     **{f"abs_{k}": f"{v:.3g}" for k, v in absolute.items()},
                     "worst": worst, "ok": worst <= 1.0 and not error, "error": error, "first": first,
                     "seconds": round(time.perf_counter() - t0, 3)})  # fmt: skip
    return rows, time.perf_counter() - start


def _warm_one(spec: Spec, seed: int, max_len: int, device: str) -> float:
    """Compile one specialisation (in a worker process) by checking one of its configurations."""
    t0 = time.perf_counter()
    check(draw(seed, spec, max_len), device)
    return time.perf_counter() - t0


def warm(specs: list[Spec], seed0: int, max_len: int, device: str, procs: int) -> float:
    """Compile every specialisation in ``procs`` parallel processes (Triton's on-disk cache is shared)."""
    import concurrent.futures
    import multiprocessing

    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        jobs = [pool.submit(_warm_one, s, seed0 + s.index, max_len, device) for s in specs]
        for job in jobs:
            job.result()
    return time.perf_counter() - t0


def write(rows: list[dict], elapsed: float, out_dir: Path, device: str, requested: int, n_specs: int) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "cuda" if device == "cuda" else "cpu_interpreter"
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out_dir / f"kernel_fuzz_{tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    stats = sorted({k for r in rows for k in r if k.startswith("err_")})
    seeds = f"seeds {rows[0]['seed']}..{rows[-1]['seed']}" if rows else "none"
    first = {int(r["spec"]): float(r["seconds"]) for r in rows if r["first"]}
    later = sorted(float(r["seconds"]) for r in rows if not r["first"])
    pin = os.environ.get("FLASHSTATS_CONFIG_INDEX", "")
    lines = [
        f"# Kernel fuzz ({tag})",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; {_versions(device)}.",
        f"{len(rows)} of {requested} random configurations in {elapsed:.1f} s ({seeds}) over "
        f"{len(first)} of {n_specs} compile-time specialisations (tile candidate {pin or 'autotuned'}); "
        f"first configuration of each specialisation (compiles): {sum(first.values()):.1f} s in all; "
        f"the others: median {later[len(later) // 2] if later else 0.0:.3f} s each. Triton "
        "backend against the fp64 reference.",
        "",
        f"**Rule** (`kernel_fuzz.RULE`): {RULE}. A configuration fails when any output is over its bound "
        "(scaled error > 1, 1.0 = at the bound) or the kernel raises; the failure count below applies "
        "exactly this rule.",
        "",
        "| output | configurations | worst scaled error | seed of the worst | its max abs error "
        "| same-precision max abs error |",
        "|---|---|---|---|---|---|",
    ]
    for s in stats:
        have = [r for r in rows if s in r]
        worst = max(have, key=lambda r: r[s])
        name = s.removeprefix("err_")
        lines.append(f"| {name} | {len(have)} | {worst[s]:.3g} | {worst['seed']} | "
                     f"{worst.get(f'abs_{name}', '')} | {worst.get(f'abs_{name}_same', '')} |")  # fmt: skip
    failed = [r for r in rows if not r["ok"]]
    lines += ["", f"Failures under the rule: {len(failed)} of {len(rows)}."]
    lines += [f"- seed {r['seed']}: worst {r['worst']:.3g} {r['error']}" for r in failed[:50]]
    md = out_dir / f"kernel_fuzz_{tag}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=500, help="configurations (default 500)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--max-len", type=int, default=None, help="longest L (default 2048 on CUDA, 48 on CPU)")
    p.add_argument("--budget-s", type=float, default=280.0, help="stop drawing after this many seconds")
    p.add_argument("--specs", type=int, default=24, help="compile-time specialisations (default 24)")
    p.add_argument(
        "--warm-procs", type=int, default=0,
        help="compile the specialisations first in this many parallel processes (0: in the loop)",
    )  # fmt: skip
    p.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        p.error(
            "no CUDA device: set TRITON_INTERPRET=1 (before Python starts) to run the kernels interpreted"
        )
    os.environ.setdefault("FLASHSTATS_CONFIG_INDEX", "0")  # no autotuning: one compile per specialisation
    max_len = args.max_len or (2048 if device == "cuda" else 48)
    specs = make_specs(args.specs)
    warm_s = warm(specs, args.seed, max_len, device, args.warm_procs) if args.warm_procs > 0 else 0.0
    rows, elapsed = run(args.n, args.seed, max_len, args.budget_s - warm_s, device, specs)
    md = write(rows, elapsed + warm_s, args.out_dir, device, args.n, len(specs))
    if warm_s:
        with md.open("a") as f:
            f.write(
                f"\nThe {len(specs)} specialisations were compiled first in {args.warm_procs} parallel "
                f"processes ({warm_s:.1f} s, included in the total above).\n"
            )
    print(md.read_text())
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
