#!/usr/bin/env bash
# Session 58, run 3: the comparison as a user runs it, on today's main (`tcp-nodes.sh [--mps] --compare OUT small`:
# 3 rounds of 30 steps, --gc-every 50), CPUs pinned; the same host as runs 1-2.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s)
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  timeout 200 bash scripts/tcp-nodes.sh $f --compare $OUT/compare-$m small > $OUT/compare-$m.log 2>&1
  echo "=== compare small $m rc=$? $(( $(date +%s) - T0 )) s"; grep -vE "^\[|^ " $OUT/compare-$m.log | tail -n 30
done
cd $OUT && tar czf logs-run3.tgz *.log compare-* 2>/dev/null; rm -rf *.log compare-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
