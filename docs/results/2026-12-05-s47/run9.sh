#!/usr/bin/env bash
# Session 47, run 9: `tcp-nodes.sh [--mps] --compare OUT small` on today's main (the native TCP engine), both settings,
# CPUs pinned, on whatever card the device tool gives for nvidia-h200 (nvidia-smi -L says).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
for m in mps sliced; do
  f=""; [ $m = mps ] && f="--mps"; t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=120 timeout 200 bash scripts/tcp-nodes.sh $f --compare $OUT/$m small > $OUT/compare-$m.txt 2>&1
  echo "=== compare small $m rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-$m.txt | grep -v "^torch" | grep -v "^model" | tail -n 16
done
cd $OUT && tar czf logs-run9.tgz mps sliced compare-*.txt 2>/dev/null; rm -rf mps sliced compare-*.txt
