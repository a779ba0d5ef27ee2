#!/usr/bin/env bash
# Session 33, run 3 on the 1x H200: the issue's --compare at 350m (FSDP2 reduced by NCCL and by HOCCL, 1F1B pipeline;
# 3 interleaved rounds) in one setting per call: bash run3.sh mps | sliced. Code: run 1's (the call ring reverted).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mode=${1:?mps or sliced}
flag=""; [ "$mode" = mps ] && flag="--mps"
TCP_NODES_TIMEOUT=270 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode 350m > $OUT/compare-$mode.txt 2>&1
echo "=== compare 350m $mode rc=$?"; cat $OUT/compare-$mode.txt
cd $OUT && tar czf logs-$mode.tgz $mode && rm -rf $mode
