"""Writes WORK/settings.json for a cache extracted before run.py stored it (the extract phase's rule).

Usage: python3 benchmarks/detection/recover_settings.py GGUF WORK [dtype]
"""

import json
import sys
from pathlib import Path

import torch
from flashstats_hf import load_model
from flashstats_hf.loading import dequantized_gguf
from halluprobe import ProxyExtractor

gguf, work = sys.argv[1], Path(sys.argv[2])
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[sys.argv[3] if len(sys.argv) > 3 else "bf16"]
model, tok = load_model(dequantized_gguf(gguf, None), device="cuda", dtype=dtype)
settings = {**ProxyExtractor(model, tok).settings, "proxy": "SmolLM2-135M-Instruct", "dtype": str(dtype)}
(work / "settings.json").write_text(json.dumps(settings))
print(settings)
