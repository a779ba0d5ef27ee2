#!/usr/bin/env bash
# Session 60: what one device call runs, by the GPU it got. An H200 (the issue's machine; none has come for today's
# defaults since session 56): run1.sh, the issue's comparison at small and 350m in both settings. An H100: the
# multicast GPU tests, with nodes as processes of their own among them (new this session), then `--compare small` in
# both settings with rounds of 100 steps instead of 30 (COMPARE_STEPS), to see whether the rounds' spread is a matter
# of their length.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L
if nvidia-smi -L | grep -q H200; then
  RUN_TESTS=0 RUN_BUDGET_S=570 bash "$here/run1.sh"; exit $?
fi
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=190
T0=$(date +%s)
timeout 170 python3 -m pytest -q -rA -p no:randomly tests/gpu/test_gpu_multicast.py > $OUT/gpu-multicast.log 2>&1
echo "=== multicast GPU tests rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/gpu-multicast.log | cut -c1-400
grep -E "PASS|FAIL|ERROR" $OUT/gpu-multicast.log | head -20 | cut -c1-300
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  [ $(( T0 + 580 - $(date +%s) )) -lt 200 ] && { echo "=== compare small $m SKIPPED"; continue; }
  COMPARE_STEPS=100 timeout 200 bash scripts/tcp-nodes.sh $f --compare $OUT/small-$m small > $OUT/small-$m.log 2>&1
  echo "=== compare small $m (100 steps a round) rc=$? $(( $(date +%s) - T0 )) s"
  sed -n '/^=== HOCCL/,$p' $OUT/small-$m.log
  grep -E "^(hoccl|nccl|none) " $OUT/small-$m.log
done
cd $OUT && tar czf logs-go.tgz *.log small-* 2>/dev/null; rm -rf *.log small-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
