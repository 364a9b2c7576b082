"""Fuzz the Triton kernels against the fp64 reference on random configurations.

Every configuration draws its runtime values (batch, KV heads, lengths, window, soft cap, scale,
prompt lengths, masks, sink positions, values) from its own seed, *within* one of a fixed list of
compile-time specialisations (`SPECS`: dtype x head dim x GQA group x mask/window/soft-cap flags x
statistic families x size class). Runtime sizes stay runtime arguments: they are drawn inside a size
class that Triton specialises the same way (integer arguments are specialised on being 1 and on
divisibility by 16), so each specialisation compiles once and every further configuration reuses it.
Tile configurations are pinned (``FLASHSTATS_CONFIG_INDEX``, candidate 0 unless set, as the GPU tests
do) so no configuration pays for autotuning. The Triton backend's every output is compared with
``naive_response_attention`` in float64. The worst error per statistic, its seed, and every
configuration's row go to ``kernel_fuzz_<device>.csv`` and a summary to ``kernel_fuzz_<device>.md``
(date, device, torch and triton versions, configurations reached, time spent compiling).

On the GPU::

    PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:) python3 benchmarks/kernel_fuzz.py --n 500

On a CPU (Triton's interpreter, a smoke run)::

    TRITON_INTERPRET=1 uv run python benchmarks/kernel_fuzz.py --n 5 --out-dir /tmp/fuzz

The exit status is 1 when any configuration exceeds its tolerance (listed in the summary).
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

# Tolerances (atol, rtol) of the statistics (fp32 accumulation of exactly upcast inputs) and of `out`
# per input dtype (the output is rounded to that dtype).
STAT_TOL = (5e-5, 5e-5)
OUT_TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
COND_ULPS = 8
"""fp32 ulps of the largest score added to every tolerance (see `check`)."""
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


def score_max(q: torch.Tensor, k: torch.Tensor, scale: float | None, softcap: float | None) -> float:
    """``max |s_ij|`` of a configuration's scaled (soft-capped) scores, in float64."""
    group = q.shape[1] // k.shape[1]
    s = torch.einsum("bhrd,bhld->bhrl", q.double(), k.double().repeat_interleave(group, dim=1))
    s = s * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    return float(s.abs().max()) if s.numel() else 0.0


def check(cfg: Config, device: str) -> tuple[dict[str, float], float, float]:
    """``(scaled errors, worst at the fixed tolerance, max |s|)`` of one configuration.

    The tolerance of every output is ``atol + rtol |want|`` (`STAT_TOL`, `OUT_TOL`) plus what fp32
    cannot resolve in the scores themselves: ``COND_ULPS * 2^-23 * max |s|`` per unit of the output
    (``1 + |want|`` for the statistics, ``max |v|`` for ``out``). At scores up to 30 that term is at most
    ``2.9e-5``; it matters only for extreme logits, where rounding ``s`` to fp32 alone moves every
    weight by more than the fixed tolerance. Scaled errors: 1.0 = at the tolerance.
    """
    import flashstats_kernels as fk

    (q, k, v), kw, request = inputs(cfg, device)
    got = _named(fk.response_attention(q, k, v, request=request, backend="triton", **kw))
    ref = _named(fk.naive_response_attention(q.double(), k.double(), v.double(), request=request, **kw))
    smax = score_max(q, k, kw["scale"], kw["softcap"])
    cond, vmax = COND_ULPS * 2.0**-23 * smax, float(v.double().abs().max()) if v.numel() else 0.0
    row: dict[str, float] = {}
    fixed = 0.0
    for name, want in ref.items():
        have = got[name].double()
        atol, rtol = OUT_TOL[q.dtype] if name == "out" else STAT_TOL
        if not torch.equal(torch.isnan(have), torch.isnan(want)):
            row[name] = fixed = float("inf")  # a NaN where the reference has none, or the reverse
            continue
        fin = torch.isfinite(want) & torch.isfinite(have)
        if not torch.equal(have[~fin].nan_to_num(0.0), want[~fin].nan_to_num(0.0)):
            row[name] = fixed = float("inf")  # infinities differ
            continue
        diff, base = (have - want).abs()[fin], (atol + rtol * want.abs())[fin]
        extra = cond * (vmax if name == "out" else 1.0 + want.abs()[fin])
        row[name] = float((diff / (base + extra)).max()) if diff.numel() else 0.0
        fixed = max(fixed, float((diff / base).max()) if diff.numel() else 0.0)
    return row, fixed, smax


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
            errs, fixed, smax = check(cfg, device)
            error = ""
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, recorded with its seed
            errs, fixed, smax = {}, float("inf"), float("nan")
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        worst = max(errs.values(), default=float("inf") if error else 0.0)
        rows.append({**dataclasses.asdict(cfg), **{f"err_{k}": v for k, v in errs.items()},
                     "worst": worst, "ok": worst <= 1.0 and not error, "error": error, "first": first,
                     "worst_fixed_tol": fixed, "score_max": round(smax, 3),
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
    tols = ", ".join(f"{str(d).removeprefix('torch.')} {a:g}" for d, (a, _) in OUT_TOL.items())
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
        "backend against the fp64 reference. Errors are scaled by the tolerance (1.0 = at it): "
        f"statistics atol = rtol = {STAT_TOL[0]}; `out` {tols}; plus {COND_ULPS} fp32 ulps of the largest "
        "score per unit of output (`check`).",
        "",
        "| output | configurations | worst scaled error | seed of the worst |",
        "|---|---|---|---|",
    ]
    for s in stats:
        have = [r for r in rows if s in r]
        worst = max(have, key=lambda r: r[s])
        lines.append(f"| {s.removeprefix('err_')} | {len(have)} | {worst[s]:.3g} | {worst['seed']} |")
    failed = [r for r in rows if not r["ok"]]
    over = [r for r in rows if float(r["worst_fixed_tol"]) > 1.0]
    lines += ["", f"Failures: {len(failed)}."]
    lines += [f"- seed {r['seed']}: worst {r['worst']:.3g} {r['error']}" for r in failed[:50]]
    lines += ["", f"Over the fixed tolerance alone (without the score term): {len(over)}."]
    lines += [f"- seed {r['seed']}: {float(r['worst_fixed_tol']):.3g} of it, max |s| = {r['score_max']}"
              for r in over[:50]]  # fmt: skip
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
