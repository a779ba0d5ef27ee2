#!/usr/bin/env bash
# Session 36, run 6 on the 1x H200 (code 5eac20d; reverted after this run): the GPU lets a network call's stream go
# (HOCCL_NET_RELEASE=gpu, that commit's default: the stream waits for its copy streams' end counters) against the
# proxy's DONE (=proxy, the rule until now: run 3's traces put 87-110 us p50 between the receiver's loop seeing a
# message in and its release). One invocation each,
# traced; then the training-over-TCP GPU tests on this code.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_RELEASE=proxy,nccl"
export TCP_NODES_TIMEOUT=200
HOCCL_NET_TRACE=$OUT/pipe-mps bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --steps 30 --repeats 3 --comm "$V" --json $OUT/pipe-mps.json > $OUT/pipe-mps.log 2>&1
echo "=== pipeline small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-mps.log | tail -n 4
HOCCL_NET_TRACE=$OUT/fsdp-mps bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --comm "$V" --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 4
bash scripts/tcp-nodes.sh examples/train_pipeline.py --size small --batch 8 --steps 30 --repeats 3 --comm "$V" \
  --json $OUT/pipe-sliced.json > $OUT/pipe-sliced.log 2>&1
echo "=== pipeline small sliced rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-sliced.log | tail -n 4
timeout 230 python3 -m pytest -q tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== training-tcp gpu tests rc=$?"; tail -3 $OUT/gputests.log
cd $OUT && tar czf logs-run6.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
