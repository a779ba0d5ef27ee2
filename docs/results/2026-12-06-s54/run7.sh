#!/usr/bin/env bash
# Session 54, run 7 (run as one command line on the warm machine of runs 4-6; written here as it ran): FSDP small under
# MPS again, 5 rounds of 20 steps, HOCCL with the native kept call, without it, and NCCL, in one invocation.
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --reduce nccl --comm hoccl,hoccl+HOCCL_NET_NATIVE_CALL=off,nccl --steps 20 --repeats 5 --json $OUT/fsdp-mps7.json \
  > $OUT/fsdp-mps7.log 2>&1
echo rc=$?; grep -E "^(comm|hoccl|nccl)" $OUT/fsdp-mps7.log | tail -4; rm -rf $OUT/cache
