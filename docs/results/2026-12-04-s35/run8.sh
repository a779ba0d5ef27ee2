#!/usr/bin/env bash
# Session 35, run 8 on the 1x H200 (code c51dec4, reverted after: no change in the stalls): the proxy process decodes a call
# in its driving thread when it takes it (no longer
# in the thread that reads the socket pair). FSDP small (NCCL reducing, MPS) and pipeline small (MPS) with the proxy's
# trace (stalls.py: against run 3's longest poll sleep per call, p50 121 us), then the training-over-TCP GPU tests.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s35
export TCP_NODES_TIMEOUT=120
HOCCL_NET_TRACE=$OUT/fsdp bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --comm hoccl,nccl --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 4
python3 $D/stalls.py $OUT/fsdp
HOCCL_NET_TRACE=$OUT/pipe bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --steps 30 --repeats 3 --comm hoccl,nccl --json $OUT/pipe-mps.json > $OUT/pipe-mps.log 2>&1
echo "=== pipeline small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-mps.log | tail -n 4
python3 $D/stalls.py $OUT/pipe
timeout 170 python3 -m pytest -q tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
cd $OUT && tar czf logs-run8.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
