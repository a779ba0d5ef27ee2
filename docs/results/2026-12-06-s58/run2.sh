#!/usr/bin/env bash
# Session 58, run 2: no hang on today's defaults (runs on alternate ring halves, writes posted ahead and spinning lanes,
# on by default since session 57): FSDP 350m (NCCL reducing) against NCCL 5 runs in a row in each setting, each a fresh
# pair of processes with 3 steps, the first a warm-up (session 53's run 3), CPUs pinned; then the GPU tests of training
# over TCP nodes as time allows.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-540}))
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for i in 1 2 3 4 5; do
    name=fsdp-350m-$mode-$i; t0=$(date +%s)
    [ $(( END - t0 )) -ge 100 ] || { echo "=== $name SKIPPED (time)"; continue; }
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=90 timeout 100 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m \
      --batch 2 --steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl --timeout 60 --json $OUT/$name.json \
      > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(hoccl|nccl) " $OUT/$name.log | tail -n 2
  done
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
