#!/usr/bin/env bash
# Session 23, run 4 on the 1x H200 (same code as run 2): the time-sliced comparison at 1.3b, 4 steps a round (the
# device time left did not cover the MPS setting).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=170 COMPARE_STEPS=4
bash scripts/tcp-nodes.sh --compare "$OUT/compare-sliced-1.3b" 1.3b > "$OUT/compare-1.3b.txt" 2>&1
echo "rc=$?" >> "$OUT/compare-1.3b.txt"; cat "$OUT/compare-1.3b.txt"
