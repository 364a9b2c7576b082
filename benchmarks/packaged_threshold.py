"""How many supported answers the packaged detector flags, one answer at a time, and at which threshold.

Scores the validation and test splits of the frozen sources (``benchmarks/transfer/prepare.py``'s
folder) with the packaged detector, then reports, per source and pooled over the test splits:

- the false-alarm rate (the share of supported answers at or above the threshold) and the recall (the
  share of hallucinated ones) at the shipped threshold;
- the same at the threshold of each rule of `transfer_threshold` (``halluprobe.training._calibration``),
  chosen on the validation splits' probabilities as the packaged fit chooses its own (``mean-f1``,
  ``calibrated-0.5``, ``false-alarm@R``).

The packaged detector was trained on these sources' training splits: the test answers are answers it
never saw, of sources it did (the held-out-source view is ``halluprobe transfer``'s).

The probabilities are kept in ``OUT/probabilities.csv`` as they come (a run stopped early resumes
there); ``--report-only`` rewrites the report from that file.

Usage: ``uv run python benchmarks/packaged_threshold.py --data DIR --out OUT [--device cpu]``
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
from pathlib import Path

import numpy as np

SOURCES = (
    "default", "ragtruth_qa", "ragtruth_summary", "ragtruth_data2txt", "faithbench", "wice", "lfqa",
    "claimverify", "expertqa",
)  # fmt: skip
RULES = ("mean-f1", "calibrated-0.5", "false-alarm@0.2", "false-alarm@0.1")
FIELDS = ("source", "split", "id", "label", "probability")


def score(data: Path, out: Path, device: str, batch_size: int, splits: tuple[str, ...]) -> None:
    """Append the packaged detector's probabilities of the ``splits``' answers not yet scored."""
    import halluprobe
    import halubench_data as hd

    path = out / "probabilities.csv"
    done = set()
    if path.is_file():
        with path.open(newline="") as f:
            done = {r["id"] for r in csv.DictReader(f)}
    examples = [e for s in SOURCES for e in hd.load(str(data / f"{s}.jsonl"))]
    todo = [e for w in splits for e in examples if e.split == w and e.id not in done]
    det = halluprobe.load()
    new = not path.is_file()
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(FIELDS)
        for i in range(0, len(todo), batch_size):
            chunk = todo[i : i + batch_size]
            preds = det.predict_batch(
                [(e.context, e.question, e.answer) for e in chunk], device=device, batch_size=batch_size
            )
            for e, p in zip(chunk, preds, strict=True):
                w.writerow((e.source, e.split, e.id, e.label, repr(float(p.probability))))
            f.flush()
            print(f"{i + len(chunk)} of {len(todo)}", flush=True)


def _rates(p: np.ndarray, y: np.ndarray, t: float) -> tuple[float, float]:
    flags = p >= t
    return float(np.mean(flags[y == 0])), float(np.mean(flags[y == 1]))


def report(out: Path, header: str) -> str:
    """The Markdown report of ``OUT/probabilities.csv``."""
    import halluprobe
    from halluprobe.training._calibration import transfer_threshold

    with (out / "probabilities.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    prob = np.array([float(r["probability"]) for r in rows])
    lab = np.array([int(r["label"]) for r in rows])
    src = np.array([r["source"] for r in rows])
    split = np.array([r["split"] for r in rows])
    # sources with scored answers of both labels in both splits (a run stopped early has fewer)
    names = [
        s for s in SOURCES
        if all(len(set(lab[(src == s) & (split == w)].tolist())) == 2 for w in ("validation", "test"))
    ]  # fmt: skip
    keep = np.isin(src, names)
    prob, lab, src, split = prob[keep], lab[keep], src[keep], split[keep]

    def by_source(which: str) -> tuple[dict, dict]:
        m = split == which
        return ({s: prob[m & (src == s)] for s in names}, {s: lab[m & (src == s)] for s in names})

    val_p, val_y = by_source("validation")
    test_p, test_y = by_source("test")
    shipped = float(halluprobe.load().probe_.threshold)
    thresholds = {"shipped": shipped, **{r: transfer_threshold(val_p, val_y, r) for r in RULES}}
    test = split == "test"
    lines = [header, "", "| threshold rule | threshold | false alarms (pooled) | recall (pooled) |"
             " mean false alarms over sources | sources with false alarms > 0.25 |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, t in thresholds.items():
        fa, rec = _rates(prob[test], lab[test], t)
        per = [_rates(test_p[s], test_y[s], t)[0] for s in names]
        over = sum(v > 0.25 for v in per)
        lines.append(
            f"| {name} | {t:.3f} | {fa:.3f} | {rec:.3f} | {np.mean(per):.3f} | {over} of {len(names)} |"
        )
    lines += ["", "Per source (test split), false alarms / recall:", "",
              "| source | supported | hallucinated | " + " | ".join(thresholds) + " |",
              "|---|---|---|" + "---|" * len(thresholds)]  # fmt: skip
    for s in names:
        cells = ["{:.2f} / {:.2f}".format(*_rates(test_p[s], test_y[s], t)) for t in thresholds.values()]
        lines.append(
            f"| {s} | {int(np.sum(test_y[s] == 0))} | {int(np.sum(test_y[s] == 1))} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the frozen sources (prepare.py's folder)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--splits", default="validation,test", help="the splits to score, in this order")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the report from the CSV")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        score(args.data, args.out, args.device, args.batch_size, tuple(args.splits.split(",")))
    import torch

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({platform.machine()})"
    header = (
        f"# The packaged detector's false alarms, one answer at a time\n\n{when}; {where}, torch "
        f"{torch.__version__}, Python {platform.python_version()}. Command: `uv run python "
        f"benchmarks/packaged_threshold.py --data DIR --out OUT --device {args.device}` on the frozen "
        "sources of `benchmarks/transfer/prepare.py`. Thresholds chosen on the validation splits' "
        "probabilities (`halluprobe.training._calibration.transfer_threshold`); rates on the test splits."
    )
    text = report(args.out, header)
    (args.out / "packaged_threshold.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
