#!/usr/bin/env bash
# Session 32, run 6 on the 1x H200: a kept list's runs told to the proxy process as their counters' moves alone
# ("tcall"). GPU tests of the network and training-over-TCP paths; a 1 MiB send's host time on one reused tensor;
# pipeline small under MPS and time-sliced, HOCCL beside NCCL, with HOCCL's layers inside the steps.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
timeout 240 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_multicast.py \
  > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -2 $OUT/gputests.log
bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline --breakdown --reuse --calls 64 \
  --no-p2p > $OUT/breakdown.log 2>&1
echo "=== breakdown (one tensor) rc=$?"; grep -E '^layer ' $OUT/breakdown.log | grep -E 'whole|_call|prepare|submit'
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
    --no-p2p --layers > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-$mode.log
  grep -E '^step layer' $OUT/pipe-$mode.log | grep -E 'batch_isend|_call|prepare|submit'
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
