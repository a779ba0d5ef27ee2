#!/usr/bin/env bash
# Session 36, run 5 on the 1x H200: FSDP 350m (NCCL reducing, MPS) with the new 1 MiB HOCCL_TCP_DIRECT_BYTES default
# against the old 256 KiB in one invocation, NCCL beside: the larger model's cut writes send their first 1 MiB part
# from the driving loop now.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TCP_NODES_TIMEOUT=400 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size 350m --batch 2 --steps 8 \
  --repeats 3 --comm "hoccl,hoccl+HOCCL_TCP_DIRECT_BYTES=262144,nccl" --reduce nccl --json $OUT/fsdp350-mps.json \
  > $OUT/fsdp350-mps.log 2>&1
echo "=== fsdp 350m mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp350-mps.log | tail -n 4
cd $OUT && tar czf logs-run5.tgz *.log *.json && rm -f *.log *.json
