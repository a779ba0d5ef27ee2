#!/usr/bin/env bash
# Session 31, run 7 on the 1x H200 (batch issued by dist.batch_isend_irecv): the torch and training-over-TCP GPU
# tests, then the comparison at small, time-sliced (scripts/tcp-nodes.sh --compare).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 280 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --compare $OUT/sliced small > $OUT/sliced.txt 2>&1
echo "=== compare sliced rc=$?"; cat $OUT/sliced.txt
cd $OUT && tar czf logs.tgz gputests.log sliced && rm -rf sliced gputests.log
