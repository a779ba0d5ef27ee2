#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU machine was lent in session 42; kept for a later session (it supersedes session 41's
# planned-run1.sh). Run 1 on the 1x H200: the GPU tests of training over TCP nodes (their --gc-every checks and the
# HOCCL_NET_ONE_STREAM=1/2 variants have never run on a GPU), of the torch backend (its reused end events) and of the
# network runtime.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 580 python3 -m pytest -q tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py \
  tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -8 $OUT/gputests.log
cd $OUT && tar czf logs-run1.tgz *.log && rm -f *.log
