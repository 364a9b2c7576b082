"""Time to the first answer of ``halluprobe predict``, cold and warm, beside importing torch and transformers.

Each measurement is a fresh process, timed from start to exit (wall clock), ``--repeat`` times; the table
gives the median and the range:

- ``import torch, transformers``: ``python -c "import torch, transformers"``, the floor of any process
  that runs the proxy;
- ``proxy forward``: the same imports, the default proxy loaded from its cache, one forward of the example
  (the process's wall time, and inside it the forward alone);
- ``predict, warm``: ``halluprobe predict --context ... --answer ...`` with the dequantised proxy cached;
- ``predict, cold``: the same with an empty proxy cache (``FLASHSTATS_CACHE`` set to a new folder), so the
  GGUF is dequantised first;
- ``Python API, warm call``: one process loads the detector (``halluprobe.load``), scores the API example
  (a context, question and answer of about 150 tokens) once, then times ``API_CALLS`` more calls of
  ``predict_batch`` on it, one answer each; a row per call. ``--detector DIR`` adds a saved detector (a
  fine-tuned reader, say) beside the packaged one, measured in the same way and in the same run.

The overhead of a warm ``predict`` is its median minus the proxy-forward process's median: what the CLI, the
detector and the statistics add to a bare forward. Whether Python may write bytecode caches
(``PYTHONDONTWRITEBYTECODE``) is recorded: without them every import compiles its modules from source.

Usage: ``uv run python benchmarks/predict_latency.py --out benchmarks/results`` (add ``--repeat N``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONTEXT = "Ada Olsen founded Tarrow Systems in Lyon in 2011."
ANSWER = "Tarrow Systems was founded in Porto."
API_CONTEXT = (
    "Ada Olsen founded Tarrow Systems in Lyon in 2011. The company makes sensors for wind turbines "
    "and employs about 240 people. In 2019 it opened a second office in Porto, which handles sales "
    "in Spain and Portugal. "
) * 2
API_QUESTION = "Where was Tarrow Systems founded?"
API_ANSWER = (
    "Tarrow Systems was founded in Porto in 2011 by Ada Olsen, and it makes sensors for solar panels."
)
API_CALLS = 5
API = f"""
import sys, time, halluprobe
det = halluprobe.load(sys.argv[1] if len(sys.argv) > 1 else None)
one = [({API_CONTEXT!r}, {API_QUESTION!r}, {API_ANSWER!r})]
det.predict_batch(one, device="cpu", batch_size=1)
for _ in range({API_CALLS}):
    t = time.perf_counter()
    det.predict_batch(one, device="cpu", batch_size=1)
    print(f"call {{time.perf_counter() - t:.4f}}")
"""
FORWARD = f"""
import time, torch, transformers
from flashstats_hf import load_model
model, tok = load_model(device="cpu")
ids = tok({CONTEXT + " " + ANSWER!r}, return_tensors="pt")
t = time.perf_counter()
with torch.no_grad():
    model(**ids)
print(f"forward {{time.perf_counter() - t:.3f}}")
"""


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    run = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed ({run.returncode}): {run.stderr[-500:]}")
    return wall, run.stdout


def measure(repeat: int, detectors: list[str] = ()) -> list[dict]:
    """Rows ``{case, run, seconds}`` (and ``forward_s`` for the proxy-forward case)."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    predict = [sys.executable, "-m", "halluprobe", "predict", "--context", CONTEXT, "--answer", ANSWER,
               "--device", "cpu", "--quiet"]  # fmt: skip
    _timed(predict, env)  # fills the proxy cache and the OS page cache once
    rows = []
    for i in range(repeat):
        wall, _ = _timed([sys.executable, "-c", "import torch, transformers"], env)
        rows.append({"case": "import torch, transformers", "run": i, "seconds": wall})
        wall, out = _timed([sys.executable, "-c", FORWARD], env)
        fwd = float(out.split()[-1])
        rows.append({"case": "proxy forward", "run": i, "seconds": wall, "forward_s": fwd})
        wall, _ = _timed(predict, env)
        rows.append({"case": "predict, warm", "run": i, "seconds": wall})
        with tempfile.TemporaryDirectory() as cache:
            wall, _ = _timed(predict, {**env, "FLASHSTATS_CACHE": cache})
        rows.append({"case": "predict, cold", "run": i, "seconds": wall})
    for name in ["packaged", *detectors]:  # one process each: the calls after its warm-up
        _, out = _timed([sys.executable, "-c", API, *([] if name == "packaged" else [name])], env)
        calls = [float(line.split()[1]) for line in out.splitlines() if line.startswith("call ")]
        case = f"Python API, warm call ({'packaged' if name == 'packaged' else Path(name).name})"
        rows += [{"case": case, "run": i, "seconds": t} for i, t in enumerate(calls)]
    return rows


def markdown(rows: list[dict], header: str) -> str:
    """The median and range of each case, and the warm overhead over a bare forward."""
    cases = list(dict.fromkeys(r["case"] for r in rows))
    med = {c: statistics.median(r["seconds"] for r in rows if r["case"] == c) for c in cases}
    lines = [header, "", "| case | median s | range s |", "|---|---|---|"]
    for c in cases:
        s = [r["seconds"] for r in rows if r["case"] == c]
        lines.append(f"| {c} | {med[c]:.2f} | {min(s):.2f}–{max(s):.2f} |")
    fwd = statistics.median(r["forward_s"] for r in rows if r["case"] == "proxy forward")
    above = med["predict, warm"] - med["import torch, transformers"] - fwd
    lines += [
        "",
        f"The forward alone (in the proxy-forward process): {fwd:.3f} s (median). A warm `predict` takes "
        f"{med['predict, warm']:.2f} s: {above:.2f} s above importing torch and transformers plus one proxy "
        f"forward, and {med['predict, warm'] - med['proxy forward']:+.2f} s against a process that imports "
        "them, loads the proxy and runs one forward.",
    ]
    if any(c.startswith("Python API") for c in cases):
        lines += ["", f"The Python API rows time {API_CALLS} calls of `predict_batch`, one answer of "
                  "about 150 tokens each, in one process after its first call."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _bytecode() -> str:
    """Whether imports read compiled bytecode: torch's and transformers' ``.pyc`` present, writing allowed."""
    import importlib.util

    present = []
    for name in ("torch", "transformers", "sklearn"):
        origin = importlib.util.find_spec(name).origin
        present.append(Path(importlib.util.cache_from_source(origin)).is_file())
    cached = (
        "compiled"
        if all(present)
        else "partly compiled"
        if any(present)
        else "not compiled (each import compiles)"
    )
    writes = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    return f"{cached}; writing .pyc {writes}"


def _header(env: dict, repeat: int, note: str, detectors: list[str] = ()) -> str:
    extra = "".join(f" --detector {d}" for d in detectors)
    return (f"# Time to the first answer of `halluprobe predict` (CPU, {env['date']})\n\n"
            f"Command: `uv run python benchmarks/predict_latency.py --repeat {repeat}{extra}`. "
            f"{env['cpu']}, Python {env['python']}, torch {env['torch']}, transformers "
            f"{env['transformers']}, bytecode cache {env['bytecode_cache']}. {note}").rstrip()  # fmt: skip


def _read(out: Path) -> tuple[dict, list[dict]]:
    """The environment and rows of a ``predict_latency.csv``."""
    with (out / "predict_latency.csv").open(newline="") as f:
        raw = list(csv.DictReader(f))
    keys = ("case", "run", "seconds", "forward_s")
    env = {k: v for k, v in raw[0].items() if k not in keys}
    rows = [{k: float(r[k]) if k in ("seconds", "forward_s") and r[k] else r[k] for k in keys} for r in raw]
    return env, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--detector",
        action="append",
        default=[],
        help="a saved detector folder timed beside the packaged one (Python API rows)",
    )
    p.add_argument("--note", default="", help="how loaded the machine was (written under the table)")
    p.add_argument("--rerender", action="store_true", help="only rewrite the Markdown from the CSV")
    args = p.parse_args()
    if args.rerender:
        env, rows = _read(args.out)
    else:
        rows = measure(args.repeat, args.detector)
        from importlib.metadata import version

        env = {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
            "cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(), "torch": version("torch"),
            "transformers": version("transformers"), "bytecode_cache": _bytecode(),
        }  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "predict_latency.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, [*env, "case", "run", "seconds", "forward_s"])
            w.writeheader()
            w.writerows({**env, **r} for r in rows)
    (args.out / "predict_latency.md").write_text(
        markdown(rows, _header(env, args.repeat, args.note, args.detector))
    )
    print((args.out / "predict_latency.md").read_text())


if __name__ == "__main__":
    main()
