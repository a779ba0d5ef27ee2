#!/usr/bin/env bash
# Session 32, run 2 on the 1x H200: the network executor's launch lists kept and issued again with new counts
# (HOCCL_NET_LAUNCH_CACHE, hoccl_runtime/net/template.py). The network GPU tests; a 1 MiB send's host time by layer
# (profile_pipeline --breakdown, as s31 run 6) with the cache off and on; pipeline small, HOCCL (cache on) beside
# NCCL, under MPS and time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
timeout 240 python3 -m pytest -q -x tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_multicast.py \
  tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log
for cache in 0 1; do
  HOCCL_NET_LAUNCH_CACHE=$cache bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline \
    --breakdown --calls 64 > $OUT/breakdown-cache$cache.log 2>&1
  echo "=== breakdown cache=$cache rc=$?"; grep -E '^(layer|group|hoccl) ' $OUT/breakdown-cache$cache.log
done
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
    --no-p2p > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-$mode.log
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
