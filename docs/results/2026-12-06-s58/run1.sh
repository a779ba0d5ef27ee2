#!/usr/bin/env bash
# Session 58, run 1 (planned in session 57 as planned-run6.sh): on today's defaults (runs on
# alternate ring halves, writes posted ahead, spinning lanes), the knobs that sessions 34-54 tried under the old
# ones, where a run waited for the peer's previous run: smaller network chunks, smaller TCP parts, fewer lanes, and
# FSDP2's explicit prefetch two blocks ahead (a run may now be one ahead of a slow peer). FSDP small (NCCL reducing)
# and pipeline small under MPS, 5 rounds of 30 steps, --gc-every 50. Two TCP nodes of one rank sharing the GPU, CPUs
# pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-420}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-10}"; }
V=hoccl,hoccl+HOCCL_NET_CHUNK_BYTES=1048576,hoccl+HOCCL_TCP_MIN_PART=524288,hoccl+HOCCL_NET_LANES=4,nccl
fits 150 && { TCP_NODES_TIMEOUT=160 timeout 170 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small \
  --batch 4 --reduce nccl --comm $V,hoccl+prefetch=2,nccl+prefetch=2 --steps 30 --repeats 5 --gc-every 50 \
  --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
  echo "=== fsdp small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-mps.log; }
fits 120 && { TCP_NODES_TIMEOUT=130 timeout 140 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small \
  --batch 8 --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/pipeline-mps.json > $OUT/pipeline-mps.log 2>&1
  echo "=== pipeline small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-mps.log; }
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
