#!/usr/bin/env bash
# Session 59, run 1: the GPU tests that run 3 nodes over TCP (tests/gpu/test_gpu_multicast.py, over_tcp: the first GPU
# run of session 58's next-run-credit fix, which takes 3 nodes or more) and the TCP training checks, then the
# comparison as a user runs it at small (`tcp-nodes.sh [--mps] --compare OUT small`: 3 rounds of 30 steps,
# --gc-every 50), CPUs pinned, on today's main; its closing HOCCL / NCCL table is printed on a device for the first time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
step() {  # step NAME TIMEOUT LOG cmd...: run cmd under timeout if it fits, else say it was skipped
  local name=$1 to=$2 log=$3; shift 3
  if [ $(( END - $(date +%s) )) -lt "$to" ]; then echo "=== $name SKIPPED"; return 1; fi
  local t0=$(date +%s); timeout "$to" "$@" > "$OUT/$log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - t0 )) s"; return $rc
}
step "GPU multicast tests over TCP (3 nodes among them)" 120 gpu-multicast.log \
  python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py -k over_tcp
tail -n 3 $OUT/gpu-multicast.log | cut -c1-300
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  step "compare small $m" 200 compare-$m.log bash scripts/tcp-nodes.sh $f --compare $OUT/compare-$m small
  sed -n '/^=== HOCCL/,$p' $OUT/compare-$m.log
  grep -E "^(hoccl|nccl|none) " $OUT/compare-$m.log | head -n 12
done
step "GPU training-over-TCP tests" 150 gpu-training-tcp.log \
  python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py
tail -n 3 $OUT/gpu-training-tcp.log | cut -c1-300
cd $OUT && tar czf logs-run1.tgz *.log compare-* 2>/dev/null; rm -rf *.log compare-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
