#!/usr/bin/env bash
# Session 23, run 3 on the 1x H200 (same code as run 2): the whole MPS comparison in one command, small and 350m.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=200
bash scripts/tcp-nodes.sh --mps --compare "$OUT/compare-mps" small,350m > "$OUT/compare-mps.txt" 2>&1
echo "rc=$?" >> "$OUT/compare-mps.txt"; cat "$OUT/compare-mps.txt"
