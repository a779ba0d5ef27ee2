#!/usr/bin/env bash
# Session 36, run 4 on the 1x H200: the GPU tests of the network runtime, the torch backend and training over TCP
# nodes on this session's code (HOCCL_TCP_DIRECT_BYTES 1 MiB by default, the frame trace).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 560 python3 -m pytest -q tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_training_tcp.py \
  tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -5 $OUT/gputests.log
