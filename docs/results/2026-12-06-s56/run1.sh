#!/usr/bin/env bash
# Session 56, run 1: the native TCP engine's lanes spinning before they block (HOCCL_TCP_SPIN_US: 300 us and 2 ms
# after their last frame, a sched_yield between looks), alone and with the proxy's loops spinning too
# (HOCCL_NET_POLL_US=0), against the default and NCCL: FSDP small (NCCL reducing) and pipeline small, MPS and
# time-sliced, 5 rounds of 30 steps, --gc-every 50; then one traced FSDP small run of the 2 ms variant under MPS.
# Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-500}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
S=HOCCL_TCP_SPIN_US
V=hoccl,hoccl+$S=300,hoccl+$S=2000,hoccl+$S=2000+HOCCL_NET_POLL_US=0,nccl
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 120 && { TCP_NODES_TIMEOUT=140 timeout 150 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/fsdp-$m.json \
    > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; }
  fits 100 && { TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/pipeline-$m.json > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; }
done
fits 45 && { HOCCL_TCP_SPIN_US=2000 HOCCL_NET_TRACE=$OUT/trace TCP_NODES_TIMEOUT=40 timeout 45 bash scripts/tcp-nodes.sh \
  --mps examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl --steps 20 --repeats 2 \
  --json $OUT/traced.json > $OUT/traced.log 2>&1
  echo "=== traced spin rc=$?"; table $OUT/traced.log; python3 -m hoccl_runtime.net.trace $OUT/trace 2>&1 | head -32; }
cd $OUT && tar czf logs-run1.tgz *.log *.json trace* 2>/dev/null; rm -rf *.log *.json trace* cache
echo "=== total $(( $(date +%s) - T0 )) s"
