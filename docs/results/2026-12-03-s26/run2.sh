#!/usr/bin/env bash
# Session 26, run 2 on the 1x H200 (c1cffd0's code): the torch and multiprocess GPU suites after the intra-node
# refusal record (run 1 had found rank 0's stream waiting forever on a rank that refused its All-to-Allv).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 500 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_multiprocess.py \
  > "$OUT/gpu-tests.log" 2>&1
echo rc=$?; tail -n 15 "$OUT/gpu-tests.log"
