#!/usr/bin/env bash
# Session 31, run 1 on the 1x H200: where a message's one-way time goes, on the host's one clock (the proxy traces'
# new t0_us column): point-to-point 64 KiB / 1 MiB and pipeline small (exchange calls), HOCCL traced, NCCL beside it,
# under MPS and time-sliced; and 1 MiB in 256 KiB network chunks (pipelined staging, TCP and landing).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
D=docs/results/2026-12-04-s31
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  HOCCL_NET_TRACE=$OUT/p2p-$mode bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --comm hoccl,nccl \
    --no-pipeline --calls 32 > $OUT/p2p-$mode.log 2>&1
  echo "=== p2p $mode rc=$?"; grep -E '^(group|hoccl|nccl) ' $OUT/p2p-$mode.log; python3 $D/oneway.py $OUT/p2p-$mode
done
HOCCL_NET_CHUNK_BYTES=262144 HOCCL_NET_TRACE=$OUT/p2p-chunk256k bash scripts/tcp-nodes.sh --mps \
  examples/profile_pipeline.py --comm hoccl --no-pipeline --calls 32 > $OUT/p2p-chunk256k.log 2>&1
echo "=== p2p mps chunk 256 KiB rc=$?"; grep -E '^(group|hoccl|nccl) ' $OUT/p2p-chunk256k.log
python3 $D/oneway.py $OUT/p2p-chunk256k
HOCCL_NET_TRACE=$OUT/pipe-mps bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
  --repeats 2 --comm hoccl,nccl --no-p2p > $OUT/pipe-mps.log 2>&1
echo "=== pipeline mps rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-mps.log; python3 $D/oneway.py $OUT/pipe-mps
cd $OUT && tar czf logs.tgz *.log *.csv 2>/dev/null; rm -f *.csv
