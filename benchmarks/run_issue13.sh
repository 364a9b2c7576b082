#!/usr/bin/env bash
# Issue 13 on the device: gpu tests of the new kernel variants while every kernel variant the benchmarks
# need compiles in parallel, then named benchmarks under time budgets. Logs and results land in $OUT/issue13.
#   PIN= PRE_JOBS="64 80 96 128 256 family:Qwen3-8B" TEST_K="D80 or D96" \
#     bash benchmarks/run_issue13.sh kernel_table:75 families:200
# PIN=N pins every kernel to tuning candidate N (default 0) and precompiles that one candidate; PIN= (empty)
# autotunes, and the precompile builds every candidate (PRE_CANDIDATES overrides either).
# FAMILIES_FROM=N skips the first N points of families.py (a second call resumes where the first stopped).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
R="$OUT/issue13"; mkdir -p "$R"
for p in packages/*/src; do PYTHONPATH="$PWD/$p:${PYTHONPATH:-}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
  date -u +%Y-%m-%dT%H:%M:%SZ; } | tee "$R/environment.txt"
if [ -n "${PRE_JOBS:-}" ]; then
  cands=${PRE_CANDIDATES:-$([ -z "${PIN-0}" ] && echo 5 || echo 1)}
  ( cd benchmarks && FLASHSTATS_PRECOMPILE_CANDIDATES=$cands timeout "${PRE_S:-110}" python3 _precompile.py 14 $PRE_JOBS ) > "$R/precompile.log" 2>&1 &
  pre=$!
fi
if [ -n "${TEST_K:-}" ]; then
  FLASHSTATS_CONFIG_INDEX=0 timeout "${TEST_S:-100}" python3 -m pytest tests/flashstats_kernels/test_triton_kernels.py \
    ${TEST_HF:-} -m gpu -k "$TEST_K" -p no:cacheprovider -q -rfE --junitxml="$R/gpu_tests.xml" > "$R/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -4 "$R/gpu_tests.log"
fi
if [ -n "${pre:-}" ]; then wait "$pre"; tail -3 "$R/precompile.log"; fi
for spec in "$@"; do
  name=${spec%%:*}; budget=${spec##*:}
  pin=${PIN-0}  # tuning candidate 0 (what a one-candidate precompile built); PIN= autotunes
  FLASHSTATS_CONFIG_INDEX=$pin timeout $(( budget + 60 )) python3 "benchmarks/$name.py" --out "$R" --budget "$budget" \
    > "$R/$name.log" 2>&1
  echo "$name rc=$?"; tail -12 "$R/$name.log"
done
