"""Freeze every source of ``../shared/data`` (and the embedded default set) for leave-one-source-out runs.

Each source is built by its halubench-data builder (the one dataset resolver, ``halubench_data.load``),
examples longer than ``--max-tokens`` proxy tokens are dropped (the proxy's window; counted in the
manifest), and at most ``--cap`` examples are kept per source, drawn per split and label (seed 0), so
the builder's group-disjoint splits stay intact. The device machine has no ``../shared``: it reads
the folder written here.

Usage::

    uv run python benchmarks/transfer/prepare.py --out .carry/transfer/data --cap 500
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SOURCES = {
    "ragtruth_qa": "ragtruth-qa:{root}/ragtruth",
    "ragtruth_summary": "ragtruth-summary:{root}/ragtruth",
    "ragtruth_data2txt": "ragtruth-data2txt:{root}/ragtruth",
    "faithbench": "faithbench:{root}/faithbench",
    "wice": "wice:{root}/llm-aggrefact",
    "lfqa": "lfqa:{root}/llm-aggrefact",
    "claimverify": "claimverify:{root}/llm-aggrefact",
    "expertqa": "expertqa:{root}/expertqa",
    "default": "default",
}
"""Source name -> dataset spec (``{root}``: the shared data folder)."""


def _cap(ds, cap: int, seed: int):
    """At most ``cap`` examples, the same share of every (split, label) cell (seeded)."""
    import halubench_data as hd

    if len(ds) <= cap:
        return ds
    rate = cap / len(ds)
    rng = np.random.default_rng(seed)
    keep = []
    for split in hd.SPLITS:
        part = ds.split(split).examples
        for label in (0, 1):
            cell = [e for e in part if e.label == label]
            n = int(round(rate * len(cell)))
            idx = sorted(rng.choice(len(cell), size=min(n, len(cell)), replace=False).tolist())
            keep.extend(cell[i] for i in idx)
    return hd.Dataset(tuple(keep), ds.name)


def main() -> None:
    import halubench_data as hd
    from flashstats_hf import format_example
    from flashstats_hf.loading import default_gguf_path, dequantized_gguf
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared" / "data"
    )
    ap.add_argument("--cap", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(dequantized_gguf(default_gguf_path()))
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {"cap": args.cap, "max_tokens": args.max_tokens, "seed": args.seed, "sources": {}}
    for name, spec in SOURCES.items():
        ds = hd.load(spec.format(root=args.root))
        fits = [
            e for e in ds if len(format_example(tok, e.context, e.question, e.answer)[0]) <= args.max_tokens
        ]
        kept = _cap(hd.Dataset(tuple(fits), name), args.cap, args.seed)
        hd.write_jsonl(kept, args.out / f"{name}.jsonl", overwrite=True)
        counts = {s: len(kept.split(s)) for s in hd.SPLITS}
        manifest["sources"][name] = {
            "spec": spec.replace("{root}", "../shared/data"),
            "built": len(ds),
            "over_max_tokens": len(ds) - len(fits),
            "kept": len(kept),
            "positives": int(sum(e.label for e in kept)),
            "splits": counts,
        }
        print(name, manifest["sources"][name], flush=True)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
