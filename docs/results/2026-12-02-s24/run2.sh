#!/usr/bin/env bash
# Session 24, run 2 on the 1x H200: FSDP 350m with HOCCL reducing under MPS, 3 rounds, traced (HOCCL_NET_TRACE), to
# find where the slow rounds lose their time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-240}
t0=$SECONDS
HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size 350m --batch 2 --steps 8 \
  --repeats 3 --comm hoccl,nccl --reduce hoccl --timeout 120 --json "$OUT/fsdp-350m-hr-mps.json" > "$OUT/fsdp-350m-hr-mps.log" 2>&1
echo "=== fsdp 350m hoccl-reduce mps rc=$? $((SECONDS - t0)) s"
grep -E "^(comm|hoccl|nccl|none) " "$OUT/fsdp-350m-hr-mps.log" | tail -n 3
