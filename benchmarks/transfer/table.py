"""The packaged detector's leave-one-source-out table beside the zero-fit overlap floor, on the same rows.

Reads the ``general.json`` that ``halluprobe train --general`` writes (held-out AUROC of every candidate
feature set per source, scored on the held-out source's train and validation splits) and the frozen
sources of ``prepare.py``; computes the overlap floor on exactly those rows and writes a Markdown table.

Usage::

    uv run python benchmarks/transfer/table.py GENERAL_JSON DATA_FOLDER > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    import halubench_data as hd

    doc = json.loads(Path(sys.argv[1]).read_text())
    data = Path(sys.argv[2])
    chosen = doc["feature_set"]
    sets = list(doc["loso_auroc"])
    print(f"| held-out source | n | overlap floor | {' | '.join(sets)} | Δ floor ({chosen}) |")
    print("|---|---|---|" + "---|" * len(sets) + "---|")
    floors, ours = [], []
    for source in sorted(doc["loso_auroc"][chosen]):
        ds = hd.read_jsonl(data / f"{source}.jsonl")
        rows = [e for e in ds if e.split in ("train", "validation")]
        y = np.array([e.label for e in rows])
        floor = hd.auroc(np.array(hd.overlap_scores(rows)), y)
        vals = [doc["loso_auroc"][s][source] for s in sets]
        floors.append(floor)
        ours.append(doc["loso_auroc"][chosen][source])
        cells = " | ".join(f"{v:.3f}" for v in vals)
        print(f"| {source} | {len(rows)} | {floor:.3f} | {cells} | {ours[-1] - floor:+.3f} |")
    means = " | ".join(f"{np.mean(list(doc['loso_auroc'][s].values())):.3f}" for s in sets)
    print(f"| mean | | {np.mean(floors):.3f} | {means} | {np.mean(ours) - np.mean(floors):+.3f} |")


if __name__ == "__main__":
    main()
