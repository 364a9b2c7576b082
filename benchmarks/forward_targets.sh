#!/usr/bin/env bash
# One device call for the whole-forward targets, each step under its own time limit (seconds):
#   1. the kernel fuzz (>= 500 configurations against fp64 under kernel_fuzz.RULE);
#   2. the Figure 1 curve (paper_j_fig1.py, Appendix J redrawn from the committed CSV) and, on the same
#      model, forward_cost.py's memory fit, overhead breakdown and graphed-plain comparison;
#   3. the served call (serve_gpu.py);
#   4. the gpu-marked tests of the recorded and graphed forwards.
# Usage: OUT=DIR bash benchmarks/forward_targets.sh   (results under $OUT, packed into $OUT/results.tgz)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
for p in packages/*/src; do PYTHONPATH="$PWD/$p:${PYTHONPATH:-}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p "$OUT/fuzz" "$OUT/fig1" "$OUT/serve"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ; } | tee "$OUT/environment.txt"
step() {  # name, limit (0: skipped), command...
  local name=$1 limit=$2; shift 2
  if [ "$limit" = 0 ]; then echo "$name: skipped" | tee -a "$OUT/steps.txt"; return; fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
step fuzz "${FUZZ_S:-115}" python3 benchmarks/kernel_fuzz.py --n 600 --specs 16 --warm-procs 16 \
  --budget-s "$(( ${FUZZ_S:-115} - 12 ))" --out-dir "$OUT/fuzz"
step fig1 "${FIG1_S:-285}" python3 benchmarks/paper_j_fig1.py --out "$OUT/fig1" --budget "${FIG1_BUDGET:-125}" \
  --j-csv benchmarks/results/paper_j.csv --extras "${EXTRAS_S:-115}" --lengths 2048,35840,8192,32768,16384
step serve "${SERVE_S:-60}" python3 benchmarks/serve_gpu.py --out "$OUT/serve/serve_gpu" --repeats 2
step tests "${TESTS_S:-40}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/flashstats_hf/test_plain_graph.py \
  tests/flashstats_hf/test_graphs.py
tail -n 40 "$OUT"/fuzz/*.md "$OUT"/fig1/*.md "$OUT"/serve/*.md "$OUT/tests.log" 2>/dev/null
tar czf "$OUT/results.tgz" --ignore-failed-read -C "$OUT" fuzz fig1 serve environment.txt steps.txt fuzz.log fig1.log serve.log tests.log
