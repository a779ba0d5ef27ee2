#!/usr/bin/env bash
# Session 56, run 4: run 1's best spinning variant again, longer: HOCCL_TCP_SPIN_US=300 against the default and NCCL,
# FSDP small (NCCL reducing) and pipeline small under MPS, 8 rounds of 30 steps, --gc-every 50. Two TCP nodes of one
# rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s)
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
V=hoccl,hoccl+HOCCL_TCP_SPIN_US=300,nccl
TCP_NODES_TIMEOUT=140 timeout 150 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --reduce nccl --comm $V --steps 30 --repeats 8 --gc-every 50 --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-mps.log
TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --comm $V --steps 30 --repeats 8 --gc-every 50 --json $OUT/pipeline-mps.json > $OUT/pipeline-mps.log 2>&1
echo "=== pipeline small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-mps.log
cd $OUT && tar czf logs-run4.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
