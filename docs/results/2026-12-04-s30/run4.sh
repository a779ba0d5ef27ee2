#!/usr/bin/env bash
# Session 30, run 4 on the 1x H200 (bab85ef: early runs, runs through once posted, ordered plan notices, a 1F1B
# pair as one exchange call, leaner host path): the layer breakdown, profile_pipeline.py in both settings (pipeline
# small HOCCL / NCCL / none, traced time-sliced), then the torch and training-over-TCP GPU tests.
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
timeout 300 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -5 $OUT/gputests.log
