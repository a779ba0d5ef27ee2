#!/usr/bin/env bash
# Session 34, run 6 on the 1x H200: FSDP 350m with NCCL reducing, as --compare runs it (batch 2, 8 steps, 3
# interleaved rounds, hoccl,nccl,none), in both settings, on the 2 MiB network chunks (the Today table's 350m rows
# were measured on 8 MiB chunks in session 33).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_TIMEOUT=110 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m --batch 2 --steps 8 \
    --repeats 3 --comm hoccl,nccl,none --reduce nccl --json $OUT/fsdp-350m-$mode.json > $OUT/fsdp-350m-$mode.log 2>&1
  echo "=== fsdp 350m nccl-reducing $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none) " $OUT/fsdp-350m-$mode.log
done
cd $OUT && tar czf logs-run6.tgz *.log *.json && rm -f *.log *.json
