#!/usr/bin/env bash
# Session 35, run 7 on the 1x H200: the torch and training-over-TCP GPU tests on this session's code.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 500 python3 -m pytest -q tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -5 $OUT/gputests.log
