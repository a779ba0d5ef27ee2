#!/usr/bin/env bash
# Session 31, run 2 on the 1x H200: a 1 MiB write cut over lanes (HOCCL_TCP_MIN_PART 256 / 128 KiB: 4 / 8 parts on
# idle lanes) against whole (the default, 1 MiB), under MPS: point-to-point one-way (traced), then pipeline small
# HOCCL (default and 256 KiB parts) / NCCL.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
D=docs/results/2026-12-04-s31
for part in 262144 131072; do
  HOCCL_TCP_MIN_PART=$part HOCCL_NET_TRACE=$OUT/p2p-part$part bash scripts/tcp-nodes.sh --mps \
    examples/profile_pipeline.py --comm hoccl,nccl --no-pipeline --calls 32 > $OUT/p2p-part$part.log 2>&1
  echo "=== p2p mps min_part $part rc=$?"; grep -E '^(group|hoccl|nccl) ' $OUT/p2p-part$part.log
  python3 $D/oneway.py $OUT/p2p-part$part
done
for part in 1048576 262144; do
  HOCCL_TCP_MIN_PART=$part bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
    --repeats 2 --comm hoccl,nccl --no-p2p > $OUT/pipe-mps-part$part.log 2>&1
  echo "=== pipeline mps min_part $part rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-mps-part$part.log
done
cd $OUT && tar czf logs.tgz *.log *.csv 2>/dev/null; rm -f *.csv
