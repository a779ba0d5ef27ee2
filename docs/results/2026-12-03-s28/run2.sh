#!/usr/bin/env bash
# Session 28, run 2 on the 1x H200: multicast plans on the GPU network executor over TCP (2 nodes of 2 ranks and 3
# nodes of 1, all on GPU 0) and on hr.execute, with the network GPU suites (training over TCP nodes, hostile).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 400 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_multicast.py \
  tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_hostile.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$?"; tail -n 8 "$OUT/gpu-tests.log"
