#!/usr/bin/env bash
# Session 31, run 10 on the 2x H200 (lent for the first time since session 11, with 4 minutes of device time left):
# training on 2 GPUs of one node, HOCCL against NCCL (and NCCL's copy-engine mode for FSDP), interleaved rounds:
# FSDP small, pipeline small, FSDP 350m, each bounded so that what finishes comes back.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
timeout 60 torchrun --nproc_per_node 2 examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 3 \
  --comm hoccl,nccl,nccl-ce,none --json $OUT/fsdp-small.json > $OUT/fsdp-small.log 2>&1
echo "=== fsdp small rc=$?"; grep -E "^(comm|hoccl|nccl|none|model)" $OUT/fsdp-small.log
timeout 45 torchrun --nproc_per_node 2 examples/train_pipeline.py --size small --batch 8 --steps 20 --repeats 3 \
  --comm hoccl,nccl,none --json $OUT/pipe-small.json > $OUT/pipe-small.log 2>&1
echo "=== pipeline small rc=$?"; grep -E "^(comm|hoccl|nccl|none|model)" $OUT/pipe-small.log
timeout 50 torchrun --nproc_per_node 2 examples/train_fsdp.py --size 350m --batch 2 --steps 6 --repeats 2 \
  --comm hoccl,nccl,nccl-ce --json $OUT/fsdp-350m.json > $OUT/fsdp-350m.log 2>&1
echo "=== fsdp 350m rc=$?"; grep -E "^(comm|hoccl|nccl|none|model)" $OUT/fsdp-350m.log
