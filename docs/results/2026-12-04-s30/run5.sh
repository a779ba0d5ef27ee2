#!/usr/bin/env bash
# Session 30, run 5 on the 1x H200 (bab85ef): the comparison at size small in both settings
# (scripts/tcp-nodes.sh --compare: FSDP reduced by NCCL and by HOCCL, 1F1B pipelining; HOCCL / NCCL / none,
# 3 interleaved rounds).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
bash scripts/tcp-nodes.sh --compare $OUT/sliced small > $OUT/sliced.txt 2>&1; echo "=== sliced rc=$?"; cat $OUT/sliced.txt
bash scripts/tcp-nodes.sh --mps --compare $OUT/mps small > $OUT/mps.txt 2>&1; echo "=== mps rc=$?"; cat $OUT/mps.txt
cd "$OUT" && tar czf logs.tgz sliced mps *.txt && rm -rf sliced mps
