#!/usr/bin/env bash
# Session 57, run 5: run 4 again on its host, MPS only, 8 rounds of 30 steps: main with the new defaults against the old ones (HOCCL_NET_OVERLAP=0, HOCCL_NET_SEND_GATES=0,
# HOCCL_TCP_SPIN_US=0) and NCCL, in one invocation per example and setting: FSDP small (NCCL reducing) and
# pipeline small, MPS then time-sliced, 5 rounds of 30 steps; then FSDP 350m under MPS as time allows.
# --gc-every 50 throughout. Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-200}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
S=hoccl+HOCCL_NET_OVERLAP=0+HOCCL_NET_SEND_GATES=0+HOCCL_TCP_SPIN_US=0
V=hoccl,$S,nccl
for m in mps; do
  f=""; [ $m = mps ] && f=--mps
  fits 110 && { TCP_NODES_TIMEOUT=120 timeout 130 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $V --steps 30 --repeats 8 --gc-every 50 --json $OUT/fsdp-$m.json \
    > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; tail -n 3 $OUT/fsdp-$m.log | cut -c1-300; }
  fits 90 && { TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm $V --steps 30 --repeats 8 --gc-every 50 --json $OUT/pipeline-$m.json > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; }
done
fits 1000 && { TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size 350m \
  --batch 2 --reduce nccl --comm $V --steps 8 --repeats 3 --gc-every 50 --json $OUT/fsdp350-mps.json \
  > $OUT/fsdp350-mps.log 2>&1
  echo "=== fsdp 350m mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp350-mps.log; }
cd $OUT && tar czf logs-run5.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
