#!/usr/bin/env bash
# Session 45, run 4, on the machine of run 3 (a 1x H100), at commit 7ed2d21: FSDP 350m reduced by HOCCL under MPS with the new
# default against the one group and NCCL gathering (2 rounds of 6 steps), then pipeline small under MPS (3 rounds).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
run() {  # NAME SCRIPT ARGS...
  local name=$1 t0; shift; t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=100 bash scripts/tcp-nodes.sh --mps "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(model|comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 5
}
run fsdp-350m-reduce-hoccl-mps examples/train_fsdp.py --size 350m --batch 2 --steps 6 --repeats 2 --reduce hoccl \
  --comm hoccl,hoccl-onegroup,nccl
run pipeline-small-mps examples/train_pipeline.py --size small --batch 8 --steps 20 --repeats 3 --comm hoccl,nccl
cd $OUT && tar czf logs-run4.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
