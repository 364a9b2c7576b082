#!/usr/bin/env bash
# The detection evaluation on a GPU machine (see docs/results/detection.md).
#
# Expects: /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf reassembled by the caller, the frozen datasets in
# .carry/data (written here by `run.py --phase prepare`), the gguf wheel in .carry/whl.
# BUDGET: seconds this script may take in all (extraction/judge/cost stop early, analysis always runs).
# PHASES: the phases run before the analysis (default extract,judge,cost). JUDGE_FROM: a judge.json of an earlier
# run on the same frozen data and model, reused instead of running the judge (the analysis checks its test ids).
# N_PAIRED: resamples of the paired tests (default 100000).
# Writes $OUT/detection_results.tgz (tables, plots, JSON) and $OUT/detection.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
BUDGET=${BUDGET:-420}
START=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site
for p in packages/*/src; do PYTHONPATH="$PWD/$p:$PYTHONPATH"; done
export PYTHONPATH PYTHONUNBUFFERED=1 FLASHSTATS_CACHE=/tmp/fscache TQDM_MININTERVAL=20
W=/tmp/detwork R=/tmp/detection
mkdir -p "$W" "$R"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$R/environment.txt"
# extraction, judge and cost stop at START + BUDGET - 150 s; the analysis gets what is left
if [ -n "${JUDGE_FROM:-}" ]; then cp "$JUDGE_FROM" "$W/judge.json"; fi
python3 benchmarks/detection/run.py --phase "${PHASES:-extract,judge,cost}" --device cuda --data .carry/data --work "$W" \
  --gguf /tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf --batch-size 16 --judge-batch 16 \
  --deadline $((START + BUDGET - 150)) 2>&1 | tee "$R/pipeline.log"
LEFT=$((START + BUDGET - $(date +%s) - 10))
timeout "$LEFT" python3 benchmarks/detection/run.py --phase analyze --data .carry/data --work "$W" --out "$R" \
  --n-paired "${N_PAIRED:-100000}" \
  2>&1 | tee "$R/analyze.log"
echo "analyze exit: $?" | tee -a "$R/analyze.log"
cp "$W/extract.json" "$W/judge.json" "$W/cost.json" "$R/" 2>/dev/null
tar czf "$OUT/detection_results.tgz" -C /tmp detection
ls -la "$R"
