#!/usr/bin/env bash
# Session 30, run 6 on the 1x H200 (bab85ef + profile_pipeline.py --layers): host us per pipeline-small step in each
# layer of the HOCCL calls (time-sliced, HOCCL and NCCL, 2 rounds of 20 steps).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl,nccl --no-p2p --layers --steps 20 --repeats 2 \
  > $OUT/layers.log 2>&1
echo rc=$?; grep -E '^(step layer|comm|hoccl|nccl)' $OUT/layers.log
