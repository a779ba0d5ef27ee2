#!/usr/bin/env bash
# Session 67, the fourth device call: on this host (GPU-29a5bd99) pipeline small ran 0.966x NCCL time-sliced (HOCCL
# 101,319 tok/s, rounds 0.882-1.028x) where host L ran it at 1.330x in session 66. Is it the lanes' default (block at
# once, since session 66)? Each job: 3 interleaved rounds of 100 steps, lanes blocking at once and spinning 300 us
# beside NCCL and no communication, in one invocation. Bounds: 120 s a job; skipped when less is left.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-540}))
V=hoccl,hoccl+HOCCL_TCP_SPIN_US=300,nccl,none
for job in ${JOBS:-sliced:pipeline mps:pipeline sliced:pipeline}; do
  m=${job%%:*} ex=${job##*:}
  [ $(( END - $(date +%s) )) -lt 120 ] && { echo "=== $job SKIPPED"; continue; }
  f=""; [ $m = mps ] && f=--mps
  name=$ex-$m-$(date +%s)
  if [ $ex = fsdp ]; then args="examples/train_fsdp.py --size small --batch 4 --reduce nccl"
  else args="examples/train_pipeline.py --size small --batch 8"; fi
  TCP_NODES_TIMEOUT=100 timeout 120 bash scripts/tcp-nodes.sh $f $args --steps 100 --repeats 3 --gc-every 50 \
    --comm $V --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $job rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/$name.log | tail -n 5
done
cd $OUT && tar czf logs-spin3.tgz *.log *.json && rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
