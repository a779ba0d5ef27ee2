#!/usr/bin/env bash
# Session 55, run 8: a smoke run of the final main (net/arena.py and comm/netconf.py split out, HOCCL_NET_POLL_US=0
# an option): FSDP small (NCCL reducing) and pipeline small over two TCP nodes under MPS, hoccl and nccl, 1 round of
# 8 steps each: the calls run and the FSDP losses equal NCCL's.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=60
timeout 70 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 --reduce nccl \
  --comm hoccl,nccl --steps 8 --repeats 1 --json $OUT/fsdp.json > $OUT/fsdp.log 2>&1
echo "=== fsdp rc=$?"; grep -E "^(comm|hoccl|nccl)[ +]" $OUT/fsdp.log
timeout 60 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 --comm hoccl,nccl \
  --steps 8 --repeats 1 --json $OUT/pipe.json > $OUT/pipe.log 2>&1
echo "=== pipeline rc=$?"; grep -E "^(comm|hoccl|nccl)[ +]" $OUT/pipe.log
rm -rf $OUT/cache $OUT/*.json
