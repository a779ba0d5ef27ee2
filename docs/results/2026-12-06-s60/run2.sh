#!/usr/bin/env bash
# Session 60, run 2: 1.3b on today's defaults (runs on alternate ring halves, writes posted ahead, spinning lanes),
# FSDP2 (NCCL reducing) and the 1F1B pipeline against NCCL, under MPS then time-sliced as time allows: 2 rounds of 3
# steps after a warm-up step, --deterministic (session 55's run 4), CPUs pinned; the same host as run 1.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-400}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
S="--size 1.3b --steps 3 --warmup 1 --repeats 2 --deterministic"
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 100 && { TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py $S --batch 2 \
    --reduce nccl --comm hoccl,nccl --json $OUT/fsdp-1.3b-$m.json > $OUT/fsdp-1.3b-$m.log 2>&1
    echo "=== fsdp 1.3b $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-1.3b-$m.log; }
  fits 110 && { TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py $S \
    --batch 8 --comm hoccl,nccl --json $OUT/pipe-1.3b-$m.json > $OUT/pipe-1.3b-$m.log 2>&1
    echo "=== pipeline 1.3b $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipe-1.3b-$m.log; }
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
