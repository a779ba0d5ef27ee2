#!/usr/bin/env bash
# Session 32, run 3 on the 1x H200 (10a762d): launch lists kept from a key's second run. GPU tests of the torch and
# network paths; a 1 MiB send's host time by layer on one reused tensor, cache off and on; pipeline small, HOCCL with
# the cache off and on (each beside NCCL in its own run), under MPS and time-sliced, with the reuse counts.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py \
  tests/gpu/test_gpu_multicast.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -2 $OUT/gputests.log
for cache in 0 1; do
  HOCCL_NET_LAUNCH_CACHE=$cache bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline \
    --breakdown --reuse --calls 64 --no-p2p > $OUT/breakdown-cache$cache.log 2>&1
  echo "=== breakdown (one tensor) cache=$cache rc=$?"; grep -E '^layer ' $OUT/breakdown-cache$cache.log | \
    grep -E 'whole|_flush|_call|prepare|launch_ops|submit'
done
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for cache in 0 1; do
    HOCCL_NET_LAUNCH_CACHE=$cache bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 \
      --repeats 2 --comm hoccl,nccl --no-p2p > $OUT/pipe-$mode-cache$cache.log 2>&1
    echo "=== pipeline small $mode cache=$cache rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-$mode-cache$cache.log
  done
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
