#!/usr/bin/env bash
# Session 57, run 3: main with the new defaults (HOCCL_NET_OVERLAP=1, HOCCL_NET_SEND_GATES=1, HOCCL_TCP_SPIN_US=300):
# the training-over-TCP GPU tests, then the comparison as a user runs it (`tcp-nodes.sh [--mps] --compare OUT small`:
# 3 rounds of 30 steps, --gc-every 50), then the network runtime's GPU tests (poisoned outputs) as time allows.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-470}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
timeout 200 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py > $OUT/training-tcp.log 2>&1
echo "=== test_gpu_training_tcp rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/training-tcp.log | cut -c1-300
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 110 && { timeout 150 bash scripts/tcp-nodes.sh $f --compare $OUT/compare-$m small > $OUT/compare-$m.log 2>&1
    echo "=== compare small $m rc=$? $(( $(date +%s) - T0 )) s"; grep -vE "^\[|^ " $OUT/compare-$m.log | tail -n 30; }
done
for t in internode multicast; do
  fits 60 && { timeout $(( END - $(date +%s) )) python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_$t.py \
    > $OUT/$t.log 2>&1; echo "=== test_gpu_$t rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/$t.log | cut -c1-300; }
done
cd $OUT && tar czf logs-run3.tgz *.log compare-* 2>/dev/null; rm -rf *.log compare-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
