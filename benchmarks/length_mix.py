"""Token lengths of the RAGTruth + ExpertQA mix under the SmolLM2 chat template (CPU; feeds packing.py).

Writes ``benchmarks/results/length_mix.json``: per source, the quantiles of the prompt and answer lengths
and every ``(prompt, answer)`` pair, so that the GPU benchmark replays the real length mix without the
data or the tokenizer. Reads ``../shared/data`` relative to the repository root.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from flashstats_hf import format_example
from flashstats_hf.loading import default_gguf_path, dequantized_gguf
from halubench_data.builders import build_expertqa, build_ragtruth
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def lengths(tokenizer, examples) -> list[tuple[int, int]]:
    """``(prompt tokens, answer tokens)`` of each formatted example."""
    out = []
    for ex in examples:
        ids, start = format_example(tokenizer, ex.context, ex.question, ex.answer)
        out.append((int(start), len(ids) - int(start)))
    return out


def main() -> int:
    if not DATA.exists():
        print(f"no data at {DATA}", file=sys.stderr)
        return 1
    tokenizer = AutoTokenizer.from_pretrained(dequantized_gguf(default_gguf_path()))
    sources = {
        "ragtruth": build_ragtruth(DATA / "ragtruth").examples,
        "expertqa": build_expertqa(DATA / "expertqa" / "expertqa_attributionbench.jsonl").examples,
    }
    result = {"tokenizer": "SmolLM2-135M-Instruct (chat template of flashstats_hf.format_example)"}
    for name, examples in sources.items():
        pairs = lengths(tokenizer, examples)
        total = np.array([p + a for p, a in pairs])
        result[name] = {
            "n": len(pairs),
            "total_quantiles": {q: int(np.quantile(total, q / 100)) for q in (0, 10, 50, 90, 99, 100)},
            "pairs": pairs,
        }
        print(name, len(pairs), result[name]["total_quantiles"])
    out = ROOT / "benchmarks" / "results" / "length_mix.json"
    out.write_text(json.dumps(result) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
