"""Run-to-run reproducibility of one recorded forward on the GPU: autotuned, pinned, deterministic.

Autotuning state lives in a process, so every run is a fresh process: the SmolLM2-135M shape with
seeded random bf16 weights reads one seeded left-padded batch (prompts and answers of the detection
pipeline's lengths) with every statistic, the logit statistics and the last hidden state. Modes:
``autotune`` (the default: the fastest candidate by timing), ``pin:N`` (``FLASHSTATS_CONFIG_INDEX=N``)
and ``deterministic`` (``torch.use_deterministic_algorithms(True)``, which pins candidate 0). Every
run is compared with the first deterministic one: bitwise equal or not, and the largest difference
of each output. The configs that autotuning kept are listed per run.

    python3 benchmarks/reproducibility.py --out OUT   # on a GPU; writes OUT/reproducibility.csv
    uv run python benchmarks/reproducibility.py --out /tmp/r --device cpu --modes autotune,autotune  # dry run
    python3 benchmarks/reproducibility.py --out OUT --compare-caches RUN1 RUN2 ...  # halluprobe --out folders

``--compare-caches`` compares the record caches of ``halluprobe extract`` runs (their ``--out``
folders) with the first one: shard files bitwise equal, and the largest difference of each record array.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

MODES = ("deterministic", "deterministic", "autotune", "autotune", "autotune", "pin:1", "pin:3")
LENGTHS, ANSWERS = [2900, 2100, 1500, 900], [380, 250, 300, 120]


def _tensors(obj, prefix: str = "") -> dict:
    """Every tensor of a (nested) dataclass, by dotted field name."""
    import torch

    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, torch.Tensor):
            out[prefix + f.name] = v.detach().float().cpu()
        elif dataclasses.is_dataclass(v):
            out.update(_tensors(v, f"{prefix}{f.name}."))
    return out


def _chosen_configs() -> dict:
    """``{kernel: {tuning key: config}}`` of the autotuners this process used."""
    from flashstats_kernels.ops.columns.fused import _tuned_columns
    from flashstats_kernels.ops.forward.fused import _tuned_forward

    out = {}
    for name, tuned in (("forward", _tuned_forward), ("columns", _tuned_columns)):
        for dc in (64, 96, 128, 256):
            try:
                cache = getattr(tuned(dc), "cache", {})
            except KeyError:
                continue
            for key, cfg in cache.items():
                out[f"{name}/{key}"] = str(cfg)
    return out


def _max_diff(a, b) -> float:
    """Largest ``|a - b|`` over the entries finite in both arrays (0 when none is)."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a - b)[finite].max()) if finite.any() else 0.0


def compare_caches(runs: list[Path]) -> list[str]:
    """One line per ``halluprobe extract`` output folder: bitwise equal to the first? worst differences."""
    import numpy as np
    from halluprobe.features import FeatureCache

    def load(run: Path) -> dict:
        return {r.id: r for r in FeatureCache(run / "cache", {}).load()}  # every record, in shard order

    ref = load(runs[0])
    lines = []
    for run in runs:
        recs, worst, same = load(run), {}, True
        for rid, r in ref.items():
            for f in dataclasses.fields(r):
                v, u = getattr(r, f.name), getattr(recs[rid], f.name)
                if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                    same = same and np.array_equal(v, u, equal_nan=True)
                    worst[f.name] = max(worst.get(f.name, 0.0), _max_diff(v, u))
        diffs = ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
        lines.append(f"{run}: {len(recs)} records, bitwise equal to the first: {same}; max abs diff: {diffs}")
    return lines


def child(mode: str, save: Path, device: str) -> None:
    """One fresh-process run of ``mode``; saves its outputs and the autotuned configs."""
    import torch

    if mode == "deterministic":
        torch.use_deterministic_algorithms(True, warn_only=True)
    elif mode.startswith("pin:"):
        os.environ["FLASHSTATS_CONFIG_INDEX"] = mode[4:]
    import flashstats_hf  # noqa: F401 - registers the attnstats attention
    from flashstats_hf import record_forward
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    shrink = 1 if device == "cuda" else 50  # the CPU dry run: 30 layers, short sequences
    lengths, answers = [n // shrink for n in LENGTHS], [a // shrink for a in ANSWERS]
    torch.manual_seed(0)
    with torch.device(device):
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="attnstats")
    model.eval()
    g = torch.Generator().manual_seed(1)
    length = max(lengths)
    ids = torch.randint(3, config.vocab_size, (len(lengths), length), generator=g)
    mask = torch.zeros(len(lengths), length, dtype=torch.int64)
    for b, n in enumerate(lengths):
        mask[b, length - n :] = 1
        ids[b, : length - n] = 0
    start = torch.tensor([length - a for a in answers])
    with torch.no_grad():
        fs = record_forward(model, ids.to(device), response_start=start.to(device),
                            attention_mask=mask.to(device), hidden_layers=[-1])  # fmt: skip
    torch.save({"tensors": _tensors(fs), "configs": _chosen_configs()}, save)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--save", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compare-caches", nargs="+", type=Path, default=None, metavar="RUN")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated runs, each in a fresh process")
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.save, args.device)
        return 0
    if args.compare_caches:
        lines = compare_caches(args.compare_caches)
        print("\n".join(lines))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compare_caches.log").write_text("\n".join(lines) + "\n")
        return 0
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for i, mode in enumerate(args.modes.split(",")):
        save = args.out / f"run{i}.pt"
        env = {k: v for k, v in os.environ.items() if k != "FLASHSTATS_CONFIG_INDEX"}
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        cmd = [sys.executable, __file__, "--out", str(args.out), "--child", mode, "--save", str(save),
               "--device", args.device]  # fmt: skip
        subprocess.run(cmd, check=True, env=env)
        runs.append((mode, torch.load(save)))
        save.unlink()
    ref_mode, ref = runs[0]
    rows = []
    for i, (mode, run) in enumerate(runs):
        diffs = {n: _max_diff(t, run["tensors"][n]) for n, t in ref["tensors"].items()}
        mine = run["tensors"]
        equal = all(torch.equal(t.nan_to_num(), mine[n].nan_to_num()) for n, t in ref["tensors"].items())
        rows.append({"run": i, "mode": mode, "bitwise_equal_to_run0": equal,
                     "max_abs_diff_hidden": diffs.get("hidden", float("nan")),
                     "max_abs_diff_any_statistic": max(v for n, v in diffs.items() if n != "hidden"),
                     "worst_statistic": max((v, n) for n, v in diffs.items() if n != "hidden")[1],
                     "configs": json.dumps(run["configs"], sort_keys=True)})  # fmt: skip
        r = rows[-1]
        print(f"run {i} {mode}: equal={equal} hidden {r['max_abs_diff_hidden']:.3g} "
              f"stats {r['max_abs_diff_any_statistic']:.3g} ({r['worst_statistic']})")  # fmt: skip
        print("   ", rows[-1]["configs"], flush=True)
    with open(args.out / "reproducibility.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
