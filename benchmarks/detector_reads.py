"""Full extraction vs detector-driven extraction (only what an A7/H64 detector reads), side by side.

CPU by default (``--device cuda`` on a GPU), SmolLM2-135M-Instruct, packed batches of real-length
examples. 'full' is what every prediction computed before: T1+T2+T3 on every layer, logits, the
kept hidden layer. 'reads' computes one A7H64 detector's reads: T1+T2 on the layers of its heads,
the hidden layer, no T3, no logits, and stops the decoder stack after the last layer read.

    uv run python benchmarks/detector_reads.py --out benchmarks/results/detector_reads
"""

from __future__ import annotations

import argparse
import csv
import datetime
import platform
import time
from importlib import metadata
from pathlib import Path

import torch
from flashstats_hf import DEFAULT_REQUEST, collate, format_example, load_model, record_forward
from halluprobe.features._reads import DetectorReads, record_reads

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/detector_reads")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tok = load_model(None, device=args.device)
    n = int(model.config.num_hidden_layers)
    batch = collate(examples(tok, args.batch, args.words), pad_token_id=0).to(args.device)
    tokens = int(batch.attention_mask.sum())

    def full():
        return record_forward(model, batch.input_ids, response_start=batch.response_start,
                              attention_mask=batch.attention_mask, request=DEFAULT_REQUEST, logits=True,
                              hidden_layers=(15,))  # fmt: skip

    runs = {"full": full}
    for name, reads in CASES.items():
        runs[name] = lambda reads=reads: record_reads(model, batch, reads, tuple(range(n)), (15,))
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
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    )
    versions = {p: metadata.version(p) for p in ("torch", "transformers", "halluprobe")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "versions", "case", "batch", "tokens", "median_s", "speedup_vs_full"])
        for k, v in med.items():
            w.writerow([when, machine, versions, k, args.batch, tokens, f"{v:.4f}", f"{med['full'] / v:.2f}"])
    lines = [f"# Detector-driven extraction vs full extraction ({args.device})", "",
             f"{when}; {machine}; {versions}; SmolLM2-135M-Instruct; one packed batch of {args.batch} "
             f"examples, {tokens} tokens; median of {args.repeats} interleaved runs after a warm-up.", "",
             "| case | median s | speed-up vs full |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {k} | {v:.3f} | {med['full'] / v:.2f}x |" for k, v in med.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
