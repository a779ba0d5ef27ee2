#!/usr/bin/env bash
# Session 28, run 1 on the 1x H200: the multicast GPU test (hr.execute, a broadcast chain, ranks on GPU 0), the
# intra-node and hostile GPU suites beside it, then the broadcast timing (multicast chain against unicast).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 240 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_multicast.py \
  tests/gpu/test_gpu_hostile.py tests/gpu/test_gpu_internode.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$?"; tail -n 6 "$OUT/gpu-tests.log"
timeout -k 10 200 python docs/results/2026-12-03-s28/bench_multicast.py 8 > "$OUT/bench-multicast.log" 2>&1
echo "=== bench rc=$?"; cat "$OUT/bench-multicast.log" | tail -8
