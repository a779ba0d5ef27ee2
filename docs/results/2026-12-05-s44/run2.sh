#!/usr/bin/env bash
# Ran in session 45 as its run2.sh (docs/results/2026-12-05-s45/); written in session 44, whose device time ended first.
# Session 44, run 2 on the 1x H200: the comparison at 1.3b on today's main, both settings, CPUs pinned: FSDP2 reduced by
# NCCL and by HOCCL (HOCCL / NCCL / none) and 1F1B pipelining (HOCCL / NCCL), 3 interleaved rounds of 3 steps after 1
# warm-up step (fewer steps than --compare's 8 to fit one call; the 1.3b steps take 1-4 s).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
run() {  # NAME TIMEOUT SCRIPT ARGS...
  local name=$1 to=$2 t0; shift 2; t0=$(date +%s); flag=""; [[ $name == *mps ]] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=$to bash scripts/tcp-nodes.sh $flag "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(model|comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 6
}
S="--size 1.3b --steps 3 --warmup 1 --repeats 3"
for mode in sliced mps; do
  run fsdp-1.3b-reduce-nccl-$mode 130 examples/train_fsdp.py $S --batch 2 --reduce nccl --comm hoccl,nccl,none
  run fsdp-1.3b-reduce-hoccl-$mode 130 examples/train_fsdp.py $S --batch 2 --reduce hoccl --comm hoccl,hoccl-rsgroup,nccl,none
  run pipeline-1.3b-$mode 130 examples/train_pipeline.py $S --batch 8 --comm hoccl,nccl
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
