#!/usr/bin/env bash
# Session 34, run 5 on the 1x H200: the issue's --compare at small, both settings, on the 2 MiB network chunks (the
# new default).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small > $OUT/compare-$mode.txt 2>&1
  echo "=== compare $mode rc=$?"; cat $OUT/compare-$mode.txt
done
cd $OUT && tar czf logs-run5.tgz mps sliced && rm -rf mps sliced
