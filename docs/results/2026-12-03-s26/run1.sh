#!/usr/bin/env bash
# Session 26, run 1 on the 1x H200: the GPU suites on today's head (the torch backend tells the other ranks of a
# rank that refuses its All-to-Allv split sizes: the new split_refusal check of the over_tcp group).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
timeout -k 10 560 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_start.py \
  tests/gpu/test_gpu_hostile.py tests/gpu/test_gpu_multiprocess.py tests/gpu/test_gpu_links.py \
  tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_intranode.py tests/gpu/test_gpu_training_tcp.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$? $((SECONDS - t0)) s"; tail -n 12 "$OUT/gpu-tests.log"
