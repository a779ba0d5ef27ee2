#!/usr/bin/env bash
# Session 33, run 1 on the 1x H200: batch_isend_irecv of one hoccl group as one call. The training-over-TCP GPU tests,
# then pipeline small's per-layer host time (--layers) and the issue's --compare at small, under MPS and time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
    --no-p2p --layers > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small layers $mode rc=$?"; grep -E '^(comm|hoccl|nccl|losses|step layer)' $OUT/pipe-$mode.log
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
