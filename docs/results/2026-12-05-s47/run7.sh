#!/usr/bin/env bash
# Session 47, run 7 (run 6's H100, warm; one inline command of the device tool): FSDP small (NCCL reducing) under MPS,
# HOCCL (the native engine, HOCCL_NET_WAKE=1) against NCCL, 3 rounds, traced (HOCCL_NET_TRACE); the trace's summary and
# session 46's agchain.py (a layer AllGather's way on the host's one clock).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/tr"
HOCCL_NET_TRACE=$OUT/tr/fsdp TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
  --size small --batch 4 --steps 20 --repeats 3 --reduce nccl --comm hoccl,nccl --json $OUT/fsdp-trace.json \
  > $OUT/fsdp-trace.log 2>&1
echo "rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-trace.log | tail -n 3
python3 -m hoccl_runtime.net.trace $OUT/tr/fsdp 2>&1 | tail -n 22
python3 docs/results/2026-12-05-s46/agchain.py $OUT/tr/fsdp
cd $OUT && tar czf logs-run7.tgz fsdp-trace.* tr && rm -rf fsdp-trace.* tr
