"""One GPU call for the kernel targets: the fuzz, T3 against Base, the decode step and the d = 64 forward.

Runs, each under its share of ``--budget`` seconds and in this order:

1. ``fuzz``: `kernel_fuzz.py` (>= 500 configurations against fp64, specialisations compiled first in
   parallel processes).
2. ``t3``: ``<=T3 / Base`` side by side in one process, bf16, batch 1, 32/8 heads, d in {128, 64},
   L in {16K, 32K}, r = R / L in {0.1, 0.3, 0.5}, both providers timed alternately at each point.
   At each point it also counts the (64-row, 128-key) tiles of one head whose every weight underflows
   fp32 (``s - lse < -87.3``, below the smallest normal ``2^-126``): the tiles an exact skip could drop.
3. ``tests``: the GPU tests of the dense-heads recorder and TOHA.
4. ``decode``: `streaming.py --benches decode` (the three shapes of the streaming table, 8K and 32K).
5. ``d64``: `families.py` at its Llama-3.2-1B, 16K, r = 0.3 point (graphed, all statistics, then the
   same forward without T3 and without any statistic).

Everything goes under ``--out``: each part's CSV and Markdown, ``summary.md`` (what ran, how long, exit
statuses). ``--smoke`` runs tiny shapes on the CPU interpreter (``TRITON_INTERPRET=1``) to check the
script itself; the parts that need CUDA then only parse their command lines.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARES = {"fuzz": 0.3, "t3": 0.25, "tests": 0.2, "decode": 0.15, "d64": 0.1}


def _run(cmd: list[str], budget: float, log: Path, env: dict | None = None) -> tuple[int, float]:
    """Run a part in a subprocess with a timeout; its output goes to ``log``."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        try:
            rc = subprocess.run(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=max(budget, 5.0),
                env={**os.environ, **(env or {})},
            ).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t0


def _inputs(length: int, d: int, device: str, seed: int = 0):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q = torch.randn((1, 32, length, d), generator=g, device=device, dtype=dtype)
    k = torch.randn((1, 8, length, d), generator=g, device=device, dtype=dtype)
    v = torch.randn((1, 8, length, d), generator=g, device=device, dtype=dtype)
    return q, k, v


def _underflow_tiles(q, k, lse, block_m: int = 64, block_n: int = 128) -> tuple[int, int]:
    """``(tiles whose every weight underflows fp32, visible tiles)`` of query head 0."""
    import torch

    qr = q[0, 0].float()  # [R, D]
    kk = k[0, 0].float()  # [L, D]
    rows, length = qr.shape[0], kk.shape[0]
    s = (qr @ kk.T) * qr.shape[-1] ** -0.5 - lse[0, 0, :, None]  # [R, L] log-weights
    pos = torch.arange(length - rows, length, device=q.device)[:, None]
    s = s.masked_fill(torch.arange(length, device=q.device)[None] > pos, float("-inf"))
    pr, pl = -rows % block_m, -length % block_n
    s = torch.nn.functional.pad(s, (0, pl, 0, pr), value=float("-inf"))
    tiles = s.view(s.shape[0] // block_m, block_m, s.shape[1] // block_n, block_n).amax((1, 3))
    visible = tiles > float("-inf")
    return int((visible & (tiles < -87.3)).sum()), int(visible.sum())


def t3_table(out: Path, budget: float, smoke: bool) -> int:
    """``<=T3 / Base`` side by side; writes ``t3_vs_base.csv`` and ``t3_vs_base.md``."""
    from flashstats_kernels import StatsRequest, response_attention

    device = "cpu" if smoke else "cuda"
    lengths, dims = ((64,), (64,)) if smoke else ((16384, 32768), (128, 64))
    base, t3 = (
        StatsRequest(rows=False),
        StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,)),
    )
    end, rows = time.monotonic() + budget, []
    for d in dims:
        for length in lengths:
            for r in (0.1, 0.3, 0.5):
                if time.monotonic() > end:
                    break
                q, k, v = _inputs(length, d, device)
                qr = q[:, :, -max(1, int(r * length)) :]
                fns = {name: _call(qr, k, v, req) for name, req in (("base", base), ("t3", t3))}
                times: dict[str, list[float]] = {"base": [], "t3": []}
                for _ in range(1 if smoke else 3):  # alternate the providers
                    for name, fn in fns.items():
                        times[name].append(_bench(fn, smoke))
                ms = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
                lse = response_attention(qr, k, v, request=base, backend="triton").lse
                skippable, visible = _underflow_tiles(qr, k, lse)
                target = 1.45 if d == 128 else 1.5
                ratio = ms["t3"] / ms["base"]
                rows.append(
                    {
                        "d": d,
                        "L": length,
                        "r": r,
                        "base_ms": round(ms["base"], 4),
                        "t3_ms": round(ms["t3"], 4),
                        "t3_over_base": round(ratio, 3),
                        "target": target,
                        "met": ratio <= target,
                        "underflow_tiles": skippable,
                        "visible_tiles": visible,
                    }
                )
                del q, k, v, qr
    with (out / "t3_vs_base.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [
        "| d | L | r | Base ms | <=T3 ms | <=T3/Base | target | met | underflowing tiles (head 0) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        lines.append(
            f"| {x['d']} | {x['L']} | {x['r']} | {x['base_ms']:.3f} | {x['t3_ms']:.3f} | "
            f"{x['t3_over_base']:.3f} | <= {x['target']} | {'met' if x['met'] else 'missed'} | "
            f"{x['underflow_tiles']} of {x['visible_tiles']} |"
        )
    (out / "t3_vs_base.md").write_text(f"{_env(device)}\n\n" + "\n".join(lines) + "\n")
    return 0


def _call(q, k, v, request):
    from flashstats_kernels import response_attention

    return lambda: response_attention(q, k, v, request=request, backend="triton")


def _bench(fn, smoke: bool) -> float:
    if smoke:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=15, rep=60, return_mode="median"))


def _env(device: str) -> str:
    import platform

    import torch
    import triton

    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU interpreter"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    versions = f"torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}"
    return f"{stamp}; {gpu}; {versions}"


def _families_index() -> int:
    sys.path.insert(0, str(HERE))
    import families

    return families.ordered_points(families.TIERS).index(("Llama-3.2-1B", 16384, "r0.3"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for all parts together")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter")
    ap.add_argument("--parts", default=",".join(SHARES), help="comma-separated parts to run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    py, parts = sys.executable, args.parts.split(",")
    summary = [
        f"# Kernel targets run\n\n{_env('cpu' if args.smoke else 'cuda')}\n",
        "| part | exit | seconds |",
        "|---|---|---|",
    ]
    start = time.perf_counter()
    for part in parts:
        left = args.budget - (time.perf_counter() - start)
        share = left * SHARES[part] / sum(SHARES[p] for p in parts[parts.index(part) :])  # leftovers carry on
        log = args.out / f"{part}.log"
        if part == "fuzz":
            n, extra = (
                ("3", ["--specs", "2", "--max-len", "8"])
                if args.smoke
                else ("600", ["--specs", "16", "--warm-procs", "16"])
            )
            cmd = [
                py,
                str(HERE / "kernel_fuzz.py"),
                "--n",
                n,
                "--budget-s",
                str(share - 15),
                "--out-dir",
                str(args.out),
                *extra,
            ]
            rc, sec = _run(cmd, share, log)
        elif part == "t3":
            t0 = time.perf_counter()
            try:
                rc = t3_table(args.out, share, args.smoke)
            except Exception as exc:  # noqa: BLE001 - recorded, the other parts still run
                log.write_text(f"{type(exc).__name__}: {exc}\n")
                rc = 1
            sec = time.perf_counter() - t0
        elif part == "tests":
            marks = "not gpu" if args.smoke else "gpu"
            cmd = [
                py,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                marks,
                "tests/flashstats_hf/test_dense_heads.py",
                "tests/halluprobe/test_model_paths.py",
            ]
            rc, sec = _run(cmd if not args.smoke else [*cmd, "--co"], share, log)
        elif part == "decode":
            cmd = [
                py,
                str(HERE / "streaming.py"),
                "--benches",
                "decode",
                "--out",
                str(args.out),
                "--budget",
                str(share * 0.6),
            ]
            rc, sec = _run(
                [*cmd, "--help"] if args.smoke else cmd, share, log, {"FLASHSTATS_CONFIG_INDEX": "0"}
            )
        else:  # d64
            env = {"FAMILIES_FROM": str(_families_index()), "FAMILIES_COUNT": "1", "FAMILIES_BREAKDOWN": "1"}
            cmd = [py, str(HERE / "families.py"), "--out", str(args.out), "--budget", str(share * 0.8)]
            rc, sec = _run([*cmd, "--help"] if args.smoke else cmd, share, log, env)
        summary.append(f"| {part} | {rc} | {sec:.1f} |")
        (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
