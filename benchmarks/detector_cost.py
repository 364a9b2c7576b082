"""Answers per second of saved detectors on the same real answers, side by side in one run.

Each detector scores the same examples through `Detector.predict_batch` (the call behind ``halluprobe
predict --input`` and ``halluprobe serve``): its proxy forward computing only what it reads, its
records, and, for a detector with the context contrast block C, the second forward without the
context. The detectors are timed alternately, ``--repeats`` times each, after one warm-up pass.

    python benchmarks/detector_cost.py --data DATA.jsonl --detector packaged --detector OLD_DIR \
        --n 256 --out $OUT/detector_cost
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import time
from importlib import metadata
from pathlib import Path

import halluprobe
import halubench_data as hd
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="a dataset spec or .jsonl file of answers to score")
    ap.add_argument("--detector", action="append", required=True, help="'packaged' or a detector folder")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/detector_cost"))
    args = ap.parse_args()
    examples = list(hd.load(args.data))[: args.n]
    triples = [(ex.context, ex.question, ex.answer) for ex in examples]
    dets = {name: halluprobe.load(None if name == "packaged" else name) for name in args.detector}
    for det in dets.values():
        det.predict_batch(
            triples[: args.batch_size], device=args.device, batch_size=args.batch_size
        )  # warm-up
    times: dict[str, list[float]] = {name: [] for name in dets}
    for _ in range(args.repeats):
        for name, det in dets.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            det.predict_batch(triples, device=args.device, batch_size=args.batch_size)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    rows = []
    for name, det in dets.items():
        med = statistics.median(times[name])
        reads = det.extractor(
            args.device
        ).reads  # None: a fine-tuned reader (one plain forward, no statistic)
        rows.append({
            "date": when, "device": gpu, "torch": torch.__version__, "triton": metadata.version("triton"),
            "detector": name, "feature_set": det.probe_.feature_set, "answers": len(triples),
            "median_s": round(med, 4), "answers_per_s": round(len(triples) / med, 1),
            "layers_read": len(reads.layers) if reads is not None else 0,
            "contrast": bool(reads.contrast) if reads is not None else False,
        })  # fmt: skip
    with open(args.out / "detector_cost.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
