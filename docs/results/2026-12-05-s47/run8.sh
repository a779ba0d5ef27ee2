#!/usr/bin/env bash
# Session 47, run 8: FSDP small (NCCL reducing) under MPS traced on today's main (the native engine), with the trace's
# new landed_us and the stream's arrival noted during the wait for the other node; the trace summary and chain.py.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/tr"
nvidia-smi -L
HOCCL_NET_TRACE=$OUT/tr/fsdp TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
  --size small --batch 4 --steps 20 --repeats 3 --reduce nccl --comm hoccl,nccl --json $OUT/fsdp-trace.json \
  > $OUT/fsdp-trace.log 2>&1
echo "rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-trace.log | tail -n 3
python3 -m hoccl_runtime.net.trace $OUT/tr/fsdp 2>&1 | tail -n 22
python3 docs/results/2026-12-05-s47/chain.py $OUT/tr/fsdp
cd $OUT && tar czf logs-run8.tgz fsdp-trace.* tr && rm -rf fsdp-trace.* tr
