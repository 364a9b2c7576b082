"""Shared helpers of the H200 performance benchmarks: environment, timing, long-format CSV, plots."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

FIELDS_ENV = ("date", "gpu", "torch", "triton")


def environment() -> dict[str, str]:
    """Date, GPU name and library versions stamped on every CSV row."""
    import triton

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def command_line() -> str:
    """The Markdown line that says how a table was made: the settings from the environment and the command."""
    prefixes = ("FLASHSTATS_", "CONFIG_SWEEP_", "KERNEL_TABLE_", "WHOLE_")
    settings = [f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith(prefixes)]
    command = " ".join([*settings, "python3", *map(shlex.quote, sys.argv)])
    return f"Command: `{command}`.\n\n"


def parse_args(doc: str) -> argparse.Namespace:
    """``--out`` (results folder) and ``--budget`` (seconds before the script stops adding rows)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--budget", type=float, default=float(os.environ.get("BENCH_BUDGET", "150")))
    ap.add_argument("--quick", action="store_true", help="a tiny grid (a smoke test of the script)")
    return ap.parse_args()


class LongCsv:
    """Append-only long-format CSV (one measurement per row), flushed after each row."""

    def __init__(self, path: Path, fields: tuple[str, ...]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.env = environment()
        self.fields = (*FIELDS_ENV, *fields)
        self._fh = path.open("w", newline="")
        self._w = csv.DictWriter(self._fh, fieldnames=self.fields)
        self._w.writeheader()
        self.rows: list[dict] = []

    def add(self, **row: object) -> None:
        full = {**self.env, **row}
        self._w.writerow(full)
        self._fh.flush()
        self.rows.append(full)

    def close(self) -> None:
        self._fh.close()


class LoadedCsv:
    """A long-format CSV read back (to redraw a report from a device run's data on another machine)."""

    def __init__(self, path: Path, ints: tuple[str, ...] = ("L", "R", "d")) -> None:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            self.fields = tuple(reader.fieldnames or ())
            self.rows = [{k: int(v) if k in ints and v else v for k, v in r.items()} for r in reader]
        self.env = {k: self.rows[0][k] for k in FIELDS_ENV} if self.rows else environment()


def bench_ms(fn: Callable[[], object], *, rep: int = 60, warmup: int = 15) -> float:
    """Median time of ``fn`` in ms (CUDA events, L2 flushed between runs: ``triton.testing.do_bench``)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def kernel_us(prof, calls: int) -> dict[str, float]:
    """Device microseconds per call of each CUDA kernel a ``torch.profiler`` run recorded.

    Kernels only: an operator's self device time repeats the time of the kernels it launched.
    """
    return {
        e.key: e.self_device_time_total / calls
        for e in prof.key_averages()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.self_device_time_total > 0
    }


class Deadline:
    """Wall-clock budget of one script, so that a device call ends inside its limit."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def over(self) -> bool:
        return time.monotonic() > self.end


def causal_pairs(length: int, rows: int) -> int:
    """Unmasked (query, key) pairs of the bottom-right causal block of ``rows`` rows over ``length`` keys."""
    return rows * (length - rows) + rows * (rows + 1) // 2


def attention_tflops(heads: int, head_dim: int, pairs: int, ms: float) -> float:
    """TFLOP/s of an attention forward counting only unmasked scores (2 matmuls, 2 FLOP per MAC)."""
    return 4.0 * heads * head_dim * pairs / (ms * 1e-3) / 1e12


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A GitHub Markdown table."""
    fmt = [" | ".join(str(c) for c in header), " | ".join("---" for _ in header)]
    fmt += [" | ".join(str(c) for c in r) for r in rows]
    return "\n".join(f"| {line} |" for line in fmt) + "\n"
