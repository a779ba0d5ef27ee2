#!/usr/bin/env bash
# Session 24, run 5 on the 1x H200: the GPU suites again after the intra-node Communicator became parts that own
# their state (bd7db5f), the same files as run 1.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
timeout -k 10 560 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_start.py \
  tests/gpu/test_gpu_hostile.py tests/gpu/test_gpu_multiprocess.py tests/gpu/test_gpu_links.py \
  tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_intranode.py tests/gpu/test_gpu_training_tcp.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$? $((SECONDS - t0)) s"; tail -n 12 "$OUT/gpu-tests.log"
