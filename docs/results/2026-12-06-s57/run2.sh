#!/usr/bin/env bash
# Session 57, run 2: which of run 1's stacked options does it (FSDP and pipeline small, MPS then time-sliced):
# in one variant (consecutive runs on alternate ring halves, writes posted ahead, lanes spinning 300 us, a spinning
# proxy), against the
# default and NCCL: FSDP small (NCCL reducing) and pipeline small under MPS, then time-sliced, 5 rounds of 30 steps,
# --gc-every 50. Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-480}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
A=HOCCL_NET_OVERLAP=1+HOCCL_NET_SEND_GATES=1+HOCCL_TCP_SPIN_US=300
S=hoccl+$A+HOCCL_NET_POLL_US=0
V=hoccl,$S,hoccl+$A,hoccl+HOCCL_NET_POLL_US=0,hoccl+HOCCL_NET_OVERLAP=1+HOCCL_NET_POLL_US=0,nccl
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 110 && { TCP_NODES_TIMEOUT=150 timeout 160 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/fsdp-$m.json \
    > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; tail -n 3 $OUT/fsdp-$m.log | cut -c1-300; }
  fits 90 && { TCP_NODES_TIMEOUT=120 timeout 130 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/pipeline-$m.json > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; }
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
