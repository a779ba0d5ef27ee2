#!/usr/bin/env bash
# Session 30, run 1 on the 1x H200: where pipeline small's host time goes, HOCCL against NCCL (both settings):
# point-to-point host cost and latency through the groups, then the pipeline's steps with their calls timed
# (examples/profile_pipeline.py); a trace of HOCCL's network calls in the time-sliced run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=200
HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh examples/profile_pipeline.py --size small --steps 20 \
  --repeats 3 > $OUT/sliced.log 2>&1
echo "=== sliced rc=$?"; grep -v '^\[' $OUT/sliced.log | grep -E '^(group|hoccl|nccl|none|comm|losses)' 
bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 --repeats 3 > $OUT/mps.log 2>&1
echo "=== mps rc=$?"; grep -v '^\[' $OUT/mps.log | grep -E '^(group|hoccl|nccl|none|comm|losses)'
