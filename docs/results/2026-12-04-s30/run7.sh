#!/usr/bin/env bash
# Session 30, run 7 on the 1x H200: the training-over-TCP GPU tests on the final runtime (the release before the
# run-done notice), then pipeline small HOCCL / NCCL under MPS (profile_pipeline.py, part 2 only).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=120
timeout 170 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
  --no-p2p > $OUT/mps.log 2>&1
echo "=== mps rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/mps.log
