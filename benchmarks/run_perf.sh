#!/usr/bin/env bash
# GPU tests (tuning candidate 0 pinned) while the tuning candidates compile
# in parallel, then named benchmarks, each under a time budget. Everything lands in $OUT/perf.tgz.
#   PERF_TESTS="tests/flashstats_kernels" PERF_DIMS="128 64 256" bash benchmarks/run_perf.sh tier_table:150 ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
R="$OUT/perf"; mkdir -p "$R"
for p in packages/*/src; do PYTHONPATH="$PWD/$p:${PYTHONPATH:-}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ; } | tee "$R/environment.txt"
( cd benchmarks && timeout 200 python3 _precompile.py 12 ${PERF_DIMS:-128 64 256} ) > "$R/precompile.log" 2>&1 &
pre=$!
FLASHSTATS_CONFIG_INDEX=0 timeout 240 python3 -m pytest ${PERF_TESTS:-tests/flashstats_kernels} -m gpu -p no:cacheprovider \
  -q -rfE --junitxml="$R/gpu_tests.xml" > "$R/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -3 "$R/gpu_tests.log"
wait $pre; tail -2 "$R/precompile.log"
for spec in "$@"; do
  name=${spec%%:*}; budget=${spec##*:}
  timeout $(( budget + 120 )) python3 "benchmarks/$name.py" --out "$R" --budget "$budget" > "$R/$name.log" 2>&1
  echo "$name rc=$?"; tail -6 "$R/$name.log"
done
tar -czf "$OUT/perf.tgz" -C "$OUT" perf && rm -rf "$R"
