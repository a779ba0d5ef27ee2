#!/usr/bin/env bash
# Session 66, the second device call: the first (go.sh of s65) found FSDP small with HOCCL reducing under MPS at 73,474
# tok/s with the lanes' default spin (HOCCL_TCP_SPIN_US=300) against 81,734 with lanes that block at once (0) and
# 81,532 with 50 us, NCCL 83,201. Is that so for the other small rows, and time-sliced? Each job: 3 interleaved rounds
# of 100 steps, the spin settings beside NCCL in one invocation. Bounds: 120 s a job; skipped when less is left.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-540}))
V=hoccl,hoccl+HOCCL_TCP_SPIN_US=0,hoccl+HOCCL_TCP_SPIN_US=50,nccl
for job in "mps fsdp hoccl" "mps fsdp nccl" "mps pipeline -" "sliced fsdp hoccl" "sliced pipeline -" "mps fsdp hoccl"; do
  set -- $job; m=$1 ex=$2 red=$3
  [ $(( END - $(date +%s) )) -lt 120 ] && { echo "=== $job SKIPPED"; continue; }
  f=""; [ $m = mps ] && f=--mps
  name=$ex-$red-$m-$(date +%s)
  if [ $ex = fsdp ]; then args="examples/train_fsdp.py --size small --batch 4 --reduce $red"
  else args="examples/train_pipeline.py --size small --batch 8"; fi
  TCP_NODES_TIMEOUT=100 timeout 120 bash scripts/tcp-nodes.sh $f $args --steps 100 --repeats 3 --gc-every 50 \
    --comm $V --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $job rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^(comm|hoccl|nccl|none) " $OUT/$name.log | tail -n 5
done
cd $OUT && tar czf logs-spin2.tgz *.log && rm -rf *.log cache
echo "=== total $(( $(date +%s) - T0 )) s"
