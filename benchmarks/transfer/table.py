"""The packaged detector's leave-one-source-out table beside the zero-fit overlap floor, on the same rows.

Reads the ``general.json`` that ``halluprobe train --general`` writes (held-out AUROC of every candidate
candidate per source, scored on the held-out source's train and validation splits; an anchored
candidate ``O+SET@w`` is shown at its best mean weight) and the frozen
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
    chosen = doc.get("candidate") or doc["feature_set"]
    means = {c: float(np.mean(list(v.values()))) for c, v in doc["loso_auroc"].items()}
    # plain candidates, and each anchored one ("O+SET@w") at its best mean weight (the chosen one kept)
    best: dict[str, str] = {}
    for c in doc["loso_auroc"]:
        family = c.split("@")[0]
        if c == chosen or (
            best.get(family) != chosen and (family not in best or means[c] > means[best[family]])
        ):
            best[family] = c
    sets = list(best.values())
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
    cells = " | ".join(f"{means[s]:.3f}" for s in sets)
    print(f"| mean | | {np.mean(floors):.3f} | {cells} | {np.mean(ours) - np.mean(floors):+.3f} |")


if __name__ == "__main__":
    main()
