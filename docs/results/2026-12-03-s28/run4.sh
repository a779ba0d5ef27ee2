#!/usr/bin/env bash
# Session 28, run 4 on the 1x H200: the multicast GPU tests again on the final code (their harness was shared with
# the CPU tests after run 2), and the intra-node suite beside them.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 300 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_multicast.py tests/gpu/test_gpu_intranode.py \
  tests/gpu/test_gpu_start.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$?"; tail -n 6 "$OUT/gpu-tests.log"
