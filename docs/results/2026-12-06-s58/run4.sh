#!/usr/bin/env bash
# Session 58, run 4: the comparison as a user runs it at 350m on today's main, under MPS then time-sliced:
# `tcp-nodes.sh [--mps] --compare OUT 350m` (FSDP2 NCCL-reducing and HOCCL-reducing, 1F1B pipeline; hoccl / nccl /
# none; 3 rounds of 8 steps, --gc-every 50). Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150
T0=$(date +%s)
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  timeout 280 bash scripts/tcp-nodes.sh $f --compare $OUT/$m 350m > $OUT/compare-$m.out 2>&1
  echo "=== compare 350m $m rc=$? $(( $(date +%s) - T0 )) s"
  grep -A9 "^===" $OUT/compare-$m.out | grep -v "^--"
done
cd $OUT && tar czf logs-run4.tgz mps sliced compare-*.out 2>/dev/null; rm -rf mps sliced compare-*.out cache
echo "=== total $(( $(date +%s) - T0 )) s"
