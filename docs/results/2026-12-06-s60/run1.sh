#!/usr/bin/env bash
# Session 60, run 1: the comparison as a user runs it (`tcp-nodes.sh [--mps] --compare OUT SIZE`: FSDP2 NCCL- and
# HOCCL-reducing and the 1F1B pipeline, hoccl / nccl / none; 3 rounds of 30 steps at small, 8 at 350m; --gc-every 50),
# CPUs pinned, on today's main, for the jobs given as SIZE:SETTING words in JOBS (default: small and 350m in both
# settings), after the pipeline's GPU test over TCP nodes (RUN_TESTS=0: not); a job is skipped when what is left of
# the call is less than its timeout. Meant for an H200: the issue's figures are the 1x H200's, and none has come for
# today's defaults.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
if [ "${RUN_TESTS:-1}" = 1 ]; then  # the pipeline's GPU test over TCP nodes, now with --deterministic, both settings
  timeout 100 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py -k pipeline > $OUT/gpu-pipeline.log 2>&1
  echo "=== pipeline GPU tests rc=$? $(( $(date +%s) - T0 )) s"; tail -n 2 $OUT/gpu-pipeline.log | cut -c1-300
fi
for job in ${JOBS:-small:mps small:sliced 350m:mps 350m:sliced}; do
  size=${job%%:*} m=${job##*:} to=120; [ "$size" = small ] || to=200
  if [ $(( END - $(date +%s) )) -lt $to ]; then echo "=== compare $size $m SKIPPED"; continue; fi
  f=""; [ $m = mps ] && f=--mps
  timeout $to bash scripts/tcp-nodes.sh $f --compare $OUT/$size-$m $size > $OUT/$size-$m.log 2>&1
  echo "=== compare $size $m rc=$? $(( $(date +%s) - T0 )) s"
  sed -n '/^=== HOCCL/,$p' $OUT/$size-$m.log
  grep -E "^(hoccl|nccl|none) " $OUT/$size-$m.log
done
cd $OUT && tar czf logs-run1.tgz *.log small-* 350m-* 2>/dev/null; rm -rf *.log small-* 350m-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
