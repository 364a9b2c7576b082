"""Fuzz the Triton kernels against the fp64 reference on random configurations (issue #20).

Each configuration is drawn from its own seed (shapes, GQA ratio, head dim, dtype, padding masks,
sliding window, soft cap, scale, prompt length, sink positions, statistic families); the Triton
backend's every output is compared with ``naive_response_attention`` in float64. The worst error
per statistic, its seed, and every configuration's row go to ``kernel_fuzz_<device>.csv`` and a
summary to ``kernel_fuzz_<device>.md`` (date, device, torch and triton versions).

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


@dataclasses.dataclass(frozen=True)
class Config:
    """One drawn configuration (everything needed to rebuild its inputs from ``seed``)."""

    seed: int
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
    rows: bool
    lookups: bool
    columns: bool


def draw(seed: int, max_len: int) -> Config:
    """A random configuration; lengths up to ``max_len``, odd sizes on purpose."""
    rng = random.Random(seed)
    seq = rng.choice([1, 2, 3, 17, 63, 111, rng.randint(4, max_len), rng.randint(max_len // 2, max_len)])
    seq = max(1, min(seq, max_len))
    hkv = rng.choice([1, 2, 3])
    return Config(
        seed=seed,
        b=rng.choice([1, 2, 3]),
        hq=hkv * rng.choice([1, 2, 3, 4]),
        hkv=hkv,
        r=rng.choice([1, seq, rng.randint(1, seq), min(seq, 64)]),
        seq=seq,
        d=rng.choice([32, 64, 64, 80, 128, 128, 256]),  # few block classes: fewer compilations
        dtype=str(rng.choice(DTYPES)).removeprefix("torch."),
        pad=rng.choice(["none", "none", "left", "middle", "full"]),
        window=rng.choice([None, None, 1, rng.randint(1, seq + 2)]),
        softcap=rng.choice([None, None, None, 2.0, 30.0]),
        scale=rng.choice([None, None, None, 0.05, 1.0, 0.0, -0.3]),
        prompt_len=None if rng.random() < 0.5 else rng.randint(0, seq),
        per_batch=rng.random() < 0.4,
        rows=rng.random() < 0.85,
        lookups=rng.random() < 0.7,
        columns=rng.random() < 0.6,
    )


def inputs(cfg: Config, device: str):
    """``(q, k, v), kwargs, request`` of a configuration, on ``device``."""
    import flashstats_kernels as fk

    gen = torch.Generator().manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    q = (torch.randn(cfg.b, cfg.hq, cfg.r, cfg.d, generator=gen) * 1.5).to(dtype)
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


def check(cfg: Config, device: str) -> dict[str, float | str]:
    """Worst scaled error of every output of one configuration (1.0 = at the tolerance)."""
    import flashstats_kernels as fk

    (q, k, v), kw, request = inputs(cfg, device)
    got = _named(fk.response_attention(q, k, v, request=request, backend="triton", **kw))
    ref = _named(fk.naive_response_attention(q.double(), k.double(), v.double(), request=request, **kw))
    row: dict[str, float | str] = {}
    for name, want in ref.items():
        have = got[name].double()
        atol, rtol = OUT_TOL[q.dtype] if name == "out" else STAT_TOL
        if not torch.equal(torch.isnan(have), torch.isnan(want)):
            row[name] = float("inf")  # a NaN where the reference has none, or the reverse
            continue
        fin = torch.isfinite(want) & torch.isfinite(have)
        if not torch.equal(have[~fin].nan_to_num(0.0), want[~fin].nan_to_num(0.0)):
            row[name] = float("inf")  # infinities differ
            continue
        err = ((have - want).abs() / (atol + rtol * want.abs()))[fin]
        row[name] = float(err.max()) if err.numel() else 0.0
    return row


def _versions(device: str) -> str:
    import triton

    name = (
        torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'interpreter'})"
    )
    return (
        f"{name}, torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}"
    )


def run(n: int, seed0: int, max_len: int, budget_s: float, device: str) -> tuple[list[dict], float]:
    rows, start = [], time.perf_counter()
    for seed in range(seed0, seed0 + n):
        if time.perf_counter() - start > budget_s:
            break
        cfg = draw(seed, max_len)
        t0 = time.perf_counter()
        try:
            errs = check(cfg, device)
            error = ""
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, recorded with its seed
            errs, error = {}, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        worst = max(errs.values(), default=float("inf") if error else 0.0)
        rows.append({**dataclasses.asdict(cfg), **{f"err_{k}": v for k, v in errs.items()},
                     "worst": worst, "ok": worst <= 1.0 and not error, "error": error,
                     "seconds": round(time.perf_counter() - t0, 3)})  # fmt: skip
    return rows, time.perf_counter() - start


def write(rows: list[dict], elapsed: float, out_dir: Path, device: str, requested: int) -> Path:
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
    lines = [
        f"# Kernel fuzz ({tag})",
        "",
        f"{datetime.date.today().isoformat()}; {_versions(device)}.",
        f"{len(rows)} of {requested} random configurations in {elapsed:.1f} s ({seeds}); Triton backend "
        "against the fp64 reference. Errors are scaled by the tolerance (1.0 = at it): statistics "
        f"atol = rtol = {STAT_TOL[0]}; `out` {tols}.",
        "",
        "| output | configurations | worst scaled error | seed of the worst |",
        "|---|---|---|---|",
    ]
    for s in stats:
        have = [r for r in rows if s in r]
        worst = max(have, key=lambda r: r[s])
        lines.append(f"| {s.removeprefix('err_')} | {len(have)} | {worst[s]:.3g} | {worst['seed']} |")
    failed = [r for r in rows if not r["ok"]]
    lines += ["", f"Failures: {len(failed)}."]
    lines += [f"- seed {r['seed']}: worst {r['worst']:.3g} {r['error']}" for r in failed[:50]]
    md = out_dir / f"kernel_fuzz_{tag}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=500, help="configurations (default 500)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--max-len", type=int, default=None, help="longest L (default 2048 on CUDA, 48 on CPU)")
    p.add_argument("--budget-s", type=float, default=110.0, help="stop drawing after this many seconds")
    p.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        p.error(
            "no CUDA device: set TRITON_INTERPRET=1 (before Python starts) to run the kernels interpreted"
        )
    max_len = args.max_len or (2048 if device == "cuda" else 48)
    rows, elapsed = run(args.n, args.seed, max_len, args.budget_s, device)
    md = write(rows, elapsed, args.out_dir, device, args.n)
    print(md.read_text())
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
