"""Full extraction vs detector-driven extraction (only what an A7/H64 detector reads), side by side.

CPU by default (``--device cuda`` on a GPU), SmolLM2-135M-Instruct, packed batches of real-length
examples. 'full' is what every prediction computed before: T1+T2+T3 on every layer, logits, the
kept hidden layer. 'reads' computes one A7H64 detector's reads: T1+T2 on the layers of its heads,
the hidden layer, no T3, no logits, and stops the decoder stack after the last layer read.

On CUDA the same cases also run as one CUDA-graph replay per example (`flashstats_hf.GraphedRecorder`,
the graph path), 'reads' captured on `stopped_proxy` (the decoder stack cut after the last layer
read); their speed-up is against the graph of the full extraction. ``--random-weights`` times a
SmolLM2-135M-shaped Llama with random weights instead of the real proxy (timing does not depend on
the weights; no model file needed).

    uv run python benchmarks/detector_reads.py --out benchmarks/results/detector_reads
    python3 benchmarks/detector_reads.py --device cuda --random-weights --out $OUT/detector_reads
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import platform
import time
from importlib import metadata
from pathlib import Path

import torch
from flashstats_hf import (
    DEFAULT_REQUEST,
    GraphedRecorder,
    collate,
    format_example,
    load_model,
    record_forward,
)
from halluprobe.features._reads import DetectorReads, complete, record_reads, stopped_proxy

CASES = {
    # A7 heads in six layers up to the middle, H64 at the middle layer (15 of 30)
    "A7H64 heads<=15": DetectorReads(
        layers=(4, 7, 9, 11, 13, 15), lookups=True, columns=False, logits=False, hidden_layers=(15,)
    ),  # fmt: skip
    # worst case: a head in the last layer (no early stop; no T3, no logits, 7 layers scored)
    "A7H64 head in last layer": DetectorReads(
        layers=(4, 7, 9, 11, 13, 15, 29), lookups=True, columns=False, logits=False, hidden_layers=(15,)
    ),  # fmt: skip
}


def examples(tok, n: int, words: int) -> list[tuple[list[int], int]]:
    text = Path(__file__).read_text().split()
    out = []
    for i in range(n):
        ctx = " ".join(text[(i * 37) % 200 :][:words] * 3)[: words * 8]
        ids, start = format_example(tok, ctx, "What does it say?", " ".join(text[i : i + 40]))
        out.append((list(ids), int(start)))
    return out


def _version(package: str) -> str:
    """The installed version, or 'source' where the package runs from a source tree (PYTHONPATH)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "source"


def random_examples(n: int, words: int) -> list[tuple[list[int], int]]:
    """Examples of random token ids about as long as `examples` makes them (for random weights)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        length = int(words * 2.2) + 60 + 7 * i
        out.append((torch.randint(10, 49000, (length,), generator=g).tolist(), length - 48))
    return out


def graph_runs(model, encoded, device: str, n: int) -> dict:
    """Per-example CUDA-graph replays of the full extraction and of each case (captured on first call)."""
    full = GraphedRecorder(model, request=DEFAULT_REQUEST, buckets=(64, 16), logits=True, hidden_layers=(15,),
                           max_graphs=16)  # fmt: skip
    tensors = [(torch.tensor([ids], device=device), start) for ids, start in encoded]

    def replay(recorder, reads=None):
        def run():
            for t, start in tensors:
                fs = recorder(t, response_start=start)
                if reads is not None:  # the shapes of a full extraction, as the server scores them
                    complete(fs, tuple(range(n)), (15,), int(model.config.num_attention_heads),
                             int(model.config.hidden_size))  # fmt: skip

        return run

    runs = {"graph full": replay(full)}
    for name, reads in CASES.items():
        request = dataclasses.replace(DEFAULT_REQUEST, lookups=reads.lookups, columns=reads.columns)
        rec = GraphedRecorder(
            stopped_proxy(model, reads), request=request, layers=reads.layers, buckets=(64, 16),
            logits=reads.logits, hidden_layers=reads.hidden_layers, max_graphs=16,
        )  # fmt: skip
        runs[f"graph {name}"] = replay(rec, reads)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--random-weights", action="store_true", help="a SmolLM2-shaped Llama, random weights")
    ap.add_argument("--out", default="benchmarks/results/detector_reads")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.random_weights:
        from serve_gpu import smollm2_shaped

        model = smollm2_shaped(args.device)
        encoded = random_examples(args.batch, args.words)
    else:
        model, tok = load_model(None, device=args.device)
        encoded = examples(tok, args.batch, args.words)
    n = int(model.config.num_hidden_layers)
    batch = collate(encoded, pad_token_id=0).to(args.device)
    tokens = int(batch.attention_mask.sum())

    def full():
        return record_forward(model, batch.input_ids, response_start=batch.response_start,
                              attention_mask=batch.attention_mask, request=DEFAULT_REQUEST, logits=True,
                              hidden_layers=(15,))  # fmt: skip

    runs = {"full": full}
    for name, reads in CASES.items():
        runs[name] = lambda reads=reads: record_reads(model, batch, reads, tuple(range(n)), (15,))
    if args.device.startswith("cuda"):
        runs.update(graph_runs(model, encoded, args.device, n))
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats + 1):  # interleaved, the first round is warm-up
        for name, fn in runs.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
    med = {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in times.items()}
    base = {k: med["graph full" if k.startswith("graph") else "full"] for k in med}
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    )
    versions = {p: _version(p) for p in ("torch", "transformers", "halluprobe")}
    proxy = "SmolLM2-135M-shaped Llama, random weights" if args.random_weights else "SmolLM2-135M-Instruct"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "versions", "case", "batch", "tokens", "median_s", "speedup_vs_full"])
        for k, v in med.items():
            w.writerow([when, machine, versions, k, args.batch, tokens, f"{v:.4f}", f"{base[k] / v:.2f}"])
    lines = [f"# Detector-driven extraction vs full extraction ({args.device})", "",
             f"{when}; {machine}; {versions}; {proxy}; one packed batch of {args.batch} "
             f"examples, {tokens} tokens; median of {args.repeats} interleaved runs after a warm-up.", "",
             "| case | median s | speed-up vs full (graph rows: vs graph full) |",
             "|---|---|---|"]  # fmt: skip
    lines += [f"| {k} | {v:.3f} | {base[k] / v:.2f}x |" for k, v in med.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
