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
there). The supported validation answers come first, as the false-alarm rules read only those; then
the rest of the validation split, then the other splits source by source. ``--report-only`` rewrites
the report from that file, ``--previous T`` adds a row for an earlier threshold, and ``--write NEW_DIR``
saves the packaged detector with its threshold chosen by ``--rule`` (default ``false-alarm@0.2``) on
these validation probabilities (`halluprobe.training._rethreshold.rethreshold`; the weights stay).

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
    # validation: the supported answers first (they alone set the false-alarm rules' thresholds);
    # the other splits: one source after the other (a source's rates need both of its labels)
    todo = [e for w in splits for e in examples if e.split == w and e.id not in done]
    todo.sort(key=lambda e: (splits.index(e.split), e.label if e.split == "validation" else 0))
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


def _read(out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``OUT/probabilities.csv`` as arrays: probability, label, source, split."""
    with (out / "probabilities.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    return (
        np.array([float(r["probability"]) for r in rows]),
        np.array([int(r["label"]) for r in rows]),
        np.array([r["source"] for r in rows]),
        np.array([r["split"] for r in rows]),
    )


def validation(scored: tuple, totals: dict[tuple[str, str, int], int]) -> tuple[dict, dict, bool, bool]:
    """The validation probabilities and labels by source of ``scored`` (`_read`), and whether every
    supported validation answer (the false-alarm rules need those) and every validation answer (the
    others) is scored."""
    prob, lab, src, split = scored
    v = split == "validation"
    probs = {s: prob[v & (src == s)] for s in SOURCES if np.any(v & (src == s))}
    labels = {s: lab[v & (src == s)] for s in probs}

    def complete(y: int) -> bool:
        return all(
            int(np.sum(labels.get(s, np.array([])) == y)) == totals[s, "validation", y] for s in SOURCES
        )

    return probs, labels, complete(0), complete(0) and complete(1)


def report(out: Path, header: str, totals: dict[tuple[str, str, int], int], previous: float | None) -> str:
    """The Markdown report of ``OUT/probabilities.csv`` (``totals``: answers per source, split, label)."""
    import halluprobe
    from halluprobe.training._calibration import transfer_threshold

    scored = _read(out)
    prob, lab, src, split = scored
    val_p, val_y, supported_done, all_done = validation(scored, totals)
    thresholds = {"shipped": float(halluprobe.load().probe_.threshold)}
    if previous is not None:
        thresholds["previously shipped"] = previous
    for rule in RULES:  # each rule only when the validation answers it reads are all scored
        if all_done or (supported_done and rule.startswith("false-alarm@")):
            thresholds[rule] = transfer_threshold(val_p, val_y, rule)
    test = split == "test"
    names = [s for s in SOURCES if len(set(lab[test & (src == s)].tolist())) == 2]
    lines = [header, "", "Answers scored, supported / hallucinated, of each split's:", "",
             "| answers of | validation | test |", "|---|---|---|"]  # fmt: skip
    for s in SOURCES:
        cells = []
        for w in ("validation", "test"):
            m = (split == w) & (src == s)
            got = [int(np.sum(m & (lab == y))) for y in (0, 1)]
            cells.append(" / ".join(f"{g} of {totals[s, w, y]}" for y, g in enumerate(got)))
        lines.append(f"| {s} | {cells[0]} | {cells[1]} |")
    left = [r for r in RULES if r not in thresholds]
    if left:
        lines += ["", f"Left out: {', '.join(left)} (the validation answers they read are not all scored)."]
    if not names:
        return "\n".join([*lines, "", "No source has scored test answers of both labels yet."]) + "\n"
    keep = test & np.isin(src, names)
    lines += ["", f"Test splits of {len(names)} sources ({', '.join(names)}):", "",
              "| threshold rule | threshold | false alarms (pooled) | recall (pooled) |"
              " mean false alarms over sources | sources with false alarms > 0.25 |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for name, t in thresholds.items():
        fa, rec = _rates(prob[keep], lab[keep], t)
        per = [_rates(prob[test & (src == s)], lab[test & (src == s)], t)[0] for s in names]
        over = sum(v > 0.25 for v in per)
        lines.append(
            f"| {name} | {t:.3f} | {fa:.3f} | {rec:.3f} | {np.mean(per):.3f} | {over} of {len(names)} |"
        )
    lines += ["", "Per source (test split), false alarms / recall:", "",
              "| source | " + " | ".join(thresholds) + " |", "|---|" + "---|" * len(thresholds)]  # fmt: skip
    for s in names:
        m = test & (src == s)
        cells = ["{:.2f} / {:.2f}".format(*_rates(prob[m], lab[m], t)) for t in thresholds.values()]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_rethresholded(out: Path, totals: dict, rule: str, folder: Path) -> Path:
    """Save the packaged detector with its threshold chosen by ``rule`` on the scored validation answers."""
    import halluprobe
    from halluprobe.training._rethreshold import rethreshold

    probs, labels, supported_done, all_done = validation(_read(out), totals)
    if not (all_done or (supported_done and rule.startswith("false-alarm@"))):
        raise SystemExit(f"--write: the validation answers that {rule} reads are not all scored yet")
    return rethreshold(halluprobe.load(), probs, labels, rule).save(folder)


def _totals(data: Path) -> dict[tuple[str, str, int], int]:
    import halubench_data as hd

    totals: dict[tuple[str, str, int], int] = dict.fromkeys(
        ((s, w, y) for s in SOURCES for w in ("validation", "test") for y in (0, 1)), 0
    )
    for s in SOURCES:
        for e in hd.load(str(data / f"{s}.jsonl")):
            if e.split in ("validation", "test"):
                totals[s, e.split, int(e.label)] += 1
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the frozen sources (prepare.py's folder)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--splits", default="validation,test", help="the splits to score, in this order")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the report from the CSV")
    ap.add_argument("--previous", type=float, help="a previously shipped threshold, reported beside")
    ap.add_argument(
        "--write", type=Path, help="save the packaged detector re-thresholded here (a new folder)"
    )
    ap.add_argument("--rule", default="false-alarm@0.2", help="the rule --write applies")
    args = ap.parse_args()
    if args.write is not None and args.write.exists():
        ap.error(f"--write: {args.write} exists; name a new folder")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        score(args.data, args.out, args.device, args.batch_size, tuple(args.splits.split(",")))
    import torch
    from halubench_data.files import atomic_write_text

    totals = _totals(args.data)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({platform.machine()})"
    header = (
        f"# The packaged detector's false alarms, one answer at a time\n\n{when}; {where}, torch "
        f"{torch.__version__}, Python {platform.python_version()}. Command: `uv run python "
        f"benchmarks/packaged_threshold.py --data DIR --out OUT --device {args.device}` on the frozen "
        "sources of `benchmarks/transfer/prepare.py`. Thresholds chosen on the validation splits' "
        "probabilities (`halluprobe.training._calibration.transfer_threshold`); rates on the test splits."
    )
    text = report(args.out, header, totals, args.previous)
    atomic_write_text(args.out / "packaged_threshold.md", text, overwrite=True)
    print(text)
    if args.write is not None:
        print(f"wrote {write_rethresholded(args.out, totals, args.rule, args.write)}")


if __name__ == "__main__":
    main()
