#!/usr/bin/env bash
# Session 49, run 1 (not run: no device was lent in session 49; for the next session): the multicast plans on the GPU
# network executor with network chunks of their own (tests/gpu/test_gpu_multicast.py: 2 nodes of 2 ranks and 3 nodes
# of 2 sharing GPU 0, 300,000 B and 256 KiB network chunks under 1 MiB copies, outputs poisoned, against the replay),
# then session 48's run 1 (the landing gates and writes posted ahead in training).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HOCCL_CACHE_DIR=$OUT/cache
t0=$(date +%s)
timeout 300 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py > $OUT/gpu-multicast.log 2>&1
echo "=== GPU multicast tests rc=$? $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/gpu-multicast.log
bash docs/results/2026-12-05-s48/run1.sh
