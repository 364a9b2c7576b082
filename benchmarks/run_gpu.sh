#!/usr/bin/env bash
# Run the gpu-marked tests and, optionally, named benchmarks in one go on a CUDA machine.
#
# Usage (`.carry/whl/` may hold wheels to install first, for a machine without network access):
#   bash benchmarks/run_gpu.sh [--no-tests] [BENCHMARK ...]
# where each BENCHMARK is a script name under benchmarks/ without `.py` (e.g. kernel_accuracy).
# The image there has python3.12 with torch, triton, transformers, scikit-learn, safetensors; it lacks `gguf`,
# which travels as a wheel in `.carry/whl/` (see benchmarks/README.md). Results go to $OUT (copied back).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
if ls .carry/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
  export PYTHONPATH=/tmp/site
fi
for p in packages/*/src; do PYTHONPATH="$PWD/$p:${PYTHONPATH:-}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
status=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ; } | tee "$OUT/environment.txt"
if [ "${1:-}" = "--no-tests" ]; then shift; else
  python3 -m pytest tests -m gpu -p no:cacheprovider -q -rfE --junitxml="$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log"
  status=${PIPESTATUS[0]}
fi
for bench in "$@"; do
  python3 "benchmarks/$bench.py" --out "$OUT" 2>&1 | tee "$OUT/$bench.log" || status=1
done
exit "$status"
