#!/usr/bin/env bash
# Session 32, run 7 on the 1x H200: does the proxy processes' polling (every 10 us, fine timer slack) slow the training
# threads' Python? Pipeline small under MPS, HOCCL beside NCCL, with HOCCL_NET_POLL_US=10 (default) and 200.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for poll in 10 200; do
  HOCCL_NET_POLL_US=$poll bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
    --repeats 2 --comm hoccl,nccl --no-p2p --layers > $OUT/pipe-poll$poll.log 2>&1
  echo "=== pipeline small mps poll=$poll us rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-poll$poll.log
  grep -E '^step layer' $OUT/pipe-poll$poll.log | grep -E 'batch_isend|prepare|submit'
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
