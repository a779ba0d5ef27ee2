#!/usr/bin/env bash
# Session 31, run 8 on the 1x H200 (batch issued by dist.batch_isend_irecv): the comparison at small under MPS.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps --compare $OUT/mps small > $OUT/mps.txt 2>&1
echo "=== compare mps rc=$?"; cat $OUT/mps.txt
cd $OUT && tar czf logs.tgz mps && rm -rf mps
