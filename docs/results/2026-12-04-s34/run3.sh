#!/usr/bin/env bash
# Session 34, run 3 on the 1x H200: the AllGather at FSDP sizes (1, 3, 8, 12 MiB a rank) with hoccl groups of network
# chunks 8, 4, 2 and 1 MiB and NCCL in one process, interleaved (agbench.py; the shorter rank's time), both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
d=docs/results/2026-12-04-s34
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag $d/agbench.py --sizes 1,3,8,12 --chunks 8,4,2,1 --repeats 15 > $OUT/ag-$mode.log 2>&1
  echo "=== $mode rc=$?"; grep -A14 "^AllGather over" $OUT/ag-$mode.log
done
cd $OUT && tar czf logs-run3.tgz *.log && rm -f *.log
