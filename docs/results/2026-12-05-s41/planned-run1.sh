#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU machine was lent in session 41 (every start failed); kept for a later session.
# Session 41, run 1 on the 1x H200: the GPU tests of training over TCP nodes (their --gc-every checks had never run),
# the multicast plans (IntColumn plans), the network runtime and the torch backend.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 330 python3 -m pytest -q tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_multicast.py \
  tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -8 $OUT/gputests.log
cd $OUT && tar czf logs-run1.tgz *.log && rm -f *.log
