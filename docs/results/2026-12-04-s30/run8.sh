#!/usr/bin/env bash
# Session 30, run 8 on the 1x H200 (final code): does the proxy's poll interval (HOCCL_NET_POLL_US 10, the default,
# against 2) move pipeline small under MPS? HOCCL / NCCL, 2 rounds of 20 steps each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=100
for p in 10 2; do
  HOCCL_NET_POLL_US=$p bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
    --repeats 2 --comm hoccl,nccl --no-p2p > $OUT/mps-poll$p.log 2>&1
  echo "=== poll $p us rc=$?"; grep -E '^(comm|hoccl|nccl)' $OUT/mps-poll$p.log
done
