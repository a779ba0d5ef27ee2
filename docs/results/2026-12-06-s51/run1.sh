#!/usr/bin/env bash
# Session 51, run 1: FSDP2's explicit prefetch (train_fsdp.py's new +prefetch=N variant option: each block's AllGather
# issued N blocks ahead) for HOCCL and for NCCL, with and without the landing gates, beside today's default; then the
# multicast GPU tests (session 50's 3x2 hang) with the launch lists in level order (hoccl_runtime/net/order.py), at the
# default hardware queues; then the 1F1B pipeline small; then 350m under MPS.
# Two TCP nodes of one rank sharing the GPU, CPUs pinned, small 5 interleaved rounds of 20 steps, 350m 3 of 8.
# Each step is skipped when what is left of the call is less than its timeout.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
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
export TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=40
L=HOCCL_NET_LAND_GATES=1
# a smoke test of the prefetch variants first (tiny, 3 steps): without it a failure would cost the whole FSDP table
if step "prefetch smoke" 50 smoke.log bash scripts/tcp-nodes.sh examples/train_fsdp.py --size tiny --steps 3 \
    --comm hoccl+prefetch=2,nccl+prefetch=2 --json $OUT/smoke.json; then
  F="hoccl,hoccl+$L,hoccl+prefetch=2,hoccl+prefetch=2+$L,nccl,nccl+prefetch=2"
else
  tail -n 20 $OUT/smoke.log; F="hoccl,hoccl+$L,nccl"
fi
export TCP_NODES_TIMEOUT=110
for m in mps sliced; do
  flag=""; [ $m = mps ] && flag="--mps"
  step "fsdp small $m" 120 fsdp-small-$m.log bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $F,none --steps 20 --repeats 5 --json $OUT/fsdp-small-$m.json
  table fsdp-small-$m.log
done
step "GPU multicast tests" 150 gpu-multicast.log python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py
tail -n 3 $OUT/gpu-multicast.log | cut -c1-300
export TCP_NODES_TIMEOUT=60
for m in mps sliced; do
  flag=""; [ $m = mps ] && flag="--mps"
  step "pipeline small $m" 70 pipeline-small-$m.log bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py \
    --size small --batch 8 --comm hoccl,hoccl+$L,nccl --steps 20 --repeats 5 --json $OUT/pipeline-small-$m.json
  table pipeline-small-$m.log
done
export TCP_NODES_TIMEOUT=140
step "fsdp 350m mps" 150 fsdp-350m-mps.log bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size 350m \
  --batch 2 --steps 8 --repeats 3 --reduce nccl --comm ${F/nccl,nccl+prefetch=2/nccl},none --json $OUT/fsdp-350m-mps.json
table fsdp-350m-mps.log
step "pipeline 350m mps" 130 pipeline-350m-mps.log bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py \
  --size 350m --batch 8 --steps 8 --repeats 3 --comm hoccl,hoccl+$L,nccl,none --json $OUT/pipeline-350m-mps.json
table pipeline-350m-mps.log
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
