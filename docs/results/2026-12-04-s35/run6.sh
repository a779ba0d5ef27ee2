#!/usr/bin/env bash
# Session 35, run 6 on the 1x H200: the issue's --compare at 350m time-sliced on the 2 MiB network chunks (session 33's
# run 3 had 8 MiB): FSDP2 reduced by NCCL and by HOCCL, 1F1B pipeline, 3 interleaved rounds each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --compare $OUT/sliced 350m > $OUT/compare-sliced.txt 2>&1
echo "=== compare 350m sliced rc=$?"; grep -v "^\[" $OUT/compare-sliced.txt | tail -n 30
cd $OUT && tar czf logs-run6.tgz sliced compare-sliced.txt && rm -rf sliced compare-sliced.txt
