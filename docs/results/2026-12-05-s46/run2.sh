#!/usr/bin/env bash
# Session 46, run 2 (after run 1, same warm machine): the small rows under MPS again, 5 interleaved rounds each, CPUs
# pinned: pipeline small (1F1B, batch 8, 20 steps) and FSDP small (NCCL reducing, batch 4, 20 steps), HOCCL / NCCL.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; nvidia-smi -L
run() { local name=$1 t0; shift; t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(model|comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 5; }
run pipeline-small-mps examples/train_pipeline.py --size small --batch 8 --steps 20 --repeats 5 --comm hoccl,nccl
run fsdp-small-reduce-nccl-mps examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 5 --reduce nccl --comm hoccl,nccl
cd $OUT && tar czf logs-run2.tgz *.log *.json; rm -f *.log *.json
