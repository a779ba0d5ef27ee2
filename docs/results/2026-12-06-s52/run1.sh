#!/usr/bin/env bash
# Session 52, run 1: where FSDP small's and pipeline small's time goes under MPS on today's main (the landing gates on
# by default), traced (HOCCL_NET_TRACE), beside NCCL and the no-communication limit, with FSDP2's explicit prefetch
# as a variant; then both time-sliced, untraced. Two TCP nodes of one rank sharing the GPU, CPUs pinned, 5
# interleaved rounds of 20 steps. gaps.py reads the traces (a call's steps and the way between calls).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/tr"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
step() {  # step NAME TIMEOUT LOG cmd...: run cmd under timeout if it fits, else say it was skipped
  local name=$1 to=$2 log=$3; shift 3
  if ! fits "$to"; then echo "=== $name SKIPPED ($(( END - $(date +%s) )) s left < $to)"; return 1; fi
  local t0=$(date +%s); timeout "$to" "$@" > "$OUT/$log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - t0 )) s"; return $rc
}
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$OUT/$1" | tail -n "${2:-8}"; }
export TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=110
HOCCL_NET_TRACE=$OUT/tr/fsdp step "fsdp small mps traced" 120 fsdp-small-mps.log bash scripts/tcp-nodes.sh --mps \
  examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl,hoccl+prefetch=2,nccl,none --steps 20 \
  --repeats 5 --json $OUT/fsdp-small-mps.json
table fsdp-small-mps.log
export TCP_NODES_TIMEOUT=60
HOCCL_NET_TRACE=$OUT/tr/pipe step "pipeline small mps traced" 70 pipeline-small-mps.log bash scripts/tcp-nodes.sh \
  --mps examples/train_pipeline.py --size small --batch 8 --comm hoccl,nccl,none --steps 20 --repeats 5 \
  --json $OUT/pipeline-small-mps.json
table pipeline-small-mps.log
ls $OUT/tr | head -30
for p in $(ls $OUT/tr/*.rank0.csv 2>/dev/null | sed 's/\.rank0\.csv$//'); do
  python3 docs/results/2026-12-06-s52/gaps.py $p 2>&1 | tail -n 32
  python3 -m hoccl_runtime.net.trace $p 2>&1 | tail -n 12
done
export TCP_NODES_TIMEOUT=110
step "fsdp small sliced" 120 fsdp-small-sliced.log bash scripts/tcp-nodes.sh examples/train_fsdp.py --size small \
  --batch 4 --reduce nccl --comm hoccl,nccl,none --steps 20 --repeats 5 --json $OUT/fsdp-small-sliced.json
table fsdp-small-sliced.log
export TCP_NODES_TIMEOUT=60
step "pipeline small sliced" 70 pipeline-small-sliced.log bash scripts/tcp-nodes.sh examples/train_pipeline.py \
  --size small --batch 8 --comm hoccl,nccl,none --steps 20 --repeats 5 --json $OUT/pipeline-small-sliced.json
table pipeline-small-sliced.log
cd $OUT && tar czf logs-run1.tgz *.log *.json tr 2>/dev/null; rm -rf *.log *.json tr cache
echo "=== total $(( $(date +%s) - T0 )) s"
