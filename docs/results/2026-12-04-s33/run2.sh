#!/usr/bin/env bash
# Session 33, run 2 on the 1x H200: the call ring (messages to the proxy process in shared memory) on top of run 1's
# whole-batch path. Training-over-TCP GPU tests; pipeline small's per-layer host time (--layers) under MPS and
# time-sliced; then the issue's --compare at small in both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
    --no-p2p --layers > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small layers $mode rc=$?"; grep -E '^(comm|hoccl|nccl|step layer .*(batch_isend|_call|submit|prepare))' $OUT/pipe-$mode.log
done
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small > $OUT/compare-$mode.txt 2>&1
  echo "=== compare $mode rc=$?"; cat $OUT/compare-$mode.txt
done
cd $OUT && tar czf logs.tgz *.log mps sliced && rm -rf *.log mps sliced
