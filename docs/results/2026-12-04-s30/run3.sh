#!/usr/bin/env bash
# Session 30, run 3 on the 1x H200 (c2ab004: early runs, runs that end once their writes are posted): host us per
# layer of a 1 MiB HOCCL send/recv through the group (time-sliced), then profile_pipeline.py in both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=200
bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline --no-p2p --breakdown --calls 64 \
  > $OUT/breakdown.log 2>&1
echo "=== breakdown rc=$?"; grep -E '^layer' $OUT/breakdown.log
HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh examples/profile_pipeline.py --size small --steps 20 \
  --repeats 3 > $OUT/sliced.log 2>&1
echo "=== sliced rc=$?"; grep -v '^\[' $OUT/sliced.log | grep -E '^(group|hoccl|nccl|none|comm|losses)'
bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 --repeats 3 > $OUT/mps.log 2>&1
echo "=== mps rc=$?"; grep -v '^\[' $OUT/mps.log | grep -E '^(group|hoccl|nccl|none|comm|losses)'
