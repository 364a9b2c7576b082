#!/usr/bin/env bash
# One device call for issue 7: gpu tests (candidate 0 pinned) while the tuning candidates compile in
# parallel, then the tier table, the length scaling and the whole-forward benchmarks, each under a time
# budget. Everything lands in $OUT/perf.tgz (one file back).
#   bash benchmarks/run_perf.sh [TIER_S LENGTH_S WHOLE_S]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
R="$OUT/perf"; mkdir -p "$R"
for p in packages/*/src; do PYTHONPATH="$PWD/$p:${PYTHONPATH:-}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ; } | tee "$R/environment.txt"
( cd benchmarks && timeout 200 python3 _precompile.py 12 ) > "$R/precompile.log" 2>&1 &
pre=$!
FLASHSTATS_CONFIG_INDEX=0 timeout 240 python3 -m pytest tests/flashstats_kernels -m gpu -p no:cacheprovider -q -rfE \
  --junitxml="$R/gpu_tests.xml" > "$R/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -3 "$R/gpu_tests.log"
wait $pre; tail -2 "$R/precompile.log"
for spec in "tier_table ${1:-150}" "length_scaling ${2:-60}" "whole_forward ${3:-90}"; do
  set -- $spec
  timeout $(( $2 + 90 )) python3 "benchmarks/$1.py" --out "$R" --budget "$2" > "$R/$1.log" 2>&1
  echo "$1 rc=$?"; tail -4 "$R/$1.log"
done
tar -czf "$OUT/perf.tgz" -C "$OUT" perf && rm -rf "$R"
