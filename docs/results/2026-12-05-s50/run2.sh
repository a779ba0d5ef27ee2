#!/usr/bin/env bash
# Session 50, run 2: run 1's one failure, the multicast AllGather of 3 nodes of 2 ranks on GPU 0 with 256 KiB network
# chunks, hung (no progress for 60 s). Six ranks' streams in one process, each blocked on stream memory waits in
# turn: more streams than the GPU's hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, default 8) would make them
# share queues, and a wait on one then holds the other's work. The 3x2 cases with the default and with 32 queues.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HOCCL_CACHE_DIR=$OUT/cache
t0=$(date +%s)
CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 100 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py -k "3-2" \
  > $OUT/mc-conn32.log 2>&1
echo "=== 3x2 cases, CUDA_DEVICE_MAX_CONNECTIONS=32 rc=$? $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/mc-conn32.log | cut -c1-400
t0=$(date +%s)
timeout 90 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py -k "3-2-None" > $OUT/mc-none.log 2>&1
echo "=== 3x2 without a network chunk, default connections rc=$? $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/mc-none.log | cut -c1-400
rm -rf $OUT/cache
