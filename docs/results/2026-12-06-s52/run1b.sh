#!/usr/bin/env bash
# Session 52, run 1b (the same warm 1x H200 as run 1, given as one command line): 1.3b on today's main, FSDP2 reduced
# by NCCL (HOCCL / NCCL / none) and the 1F1B pipeline (HOCCL / NCCL / none), under MPS then time-sliced; 3
# interleaved rounds of 3 steps after 1 warm-up step; two TCP nodes of one rank sharing the GPU, CPUs pinned.
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200
S="--size 1.3b --steps 3 --warmup 1 --repeats 3"
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  t0=$(date +%s)
  bash scripts/tcp-nodes.sh $f examples/train_fsdp.py $S --batch 2 --reduce nccl --comm hoccl,nccl,none \
    --json $OUT/fsdp-1.3b-$m.json > $OUT/fsdp-1.3b-$m.log 2>&1
  echo "=== fsdp 1.3b $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/fsdp-1.3b-$m.log | tail -4
  t0=$(date +%s)
  bash scripts/tcp-nodes.sh $f examples/train_pipeline.py $S --batch 8 --comm hoccl,nccl,none \
    --json $OUT/pipe-1.3b-$m.json > $OUT/pipe-1.3b-$m.log 2>&1
  echo "=== pipeline 1.3b $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/pipe-1.3b-$m.log | tail -4
done 2>&1 | tee $OUT/output.txt
rm -rf $OUT/cache
