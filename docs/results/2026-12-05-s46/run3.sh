#!/usr/bin/env bash
# Session 46, run 3: no hang with use_for_fsdp's new default (HOCCL reducing, the reduce-scatters on a second hoccl
# group: a second proxy process per rank): FSDP 350m reduced by HOCCL against NCCL gathering (HOCCL reducing), 5 runs
# in a row in each setting, each a fresh pair of processes with 3 steps (the first a warm-up), CPUs pinned; as
# session 44's run 3 did with NCCL reducing.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for i in 1 2 3 4 5; do
    name=fsdp-350m-reduce-hoccl-$mode-$i; t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=90 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m --batch 2 \
      --steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce hoccl --timeout 60 --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(hoccl|nccl) " $OUT/$name.log | tail -n 2
  done
done
cd $OUT && tar czf logs-run3.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
