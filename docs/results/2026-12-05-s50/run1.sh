#!/usr/bin/env bash
# Session 50, run 1: session 49's and 48's runs cut to what one 600 s call holds, most wanted first, each step skipped
# when what is left of the call is less than its timeout. 1) the multicast GPU tests with network chunks of their own;
# 2) the landing gates (HOCCL_NET_LAND_GATES=1) and writes posted ahead (HOCCL_NET_SEND_GATES=1) against today's
# default, over two TCP nodes sharing the GPU: FSDP small (NCCL reducing) and 1F1B pipeline small, 5 interleaved
# rounds of 20 steps, CPUs pinned, MPS and time-sliced; 3) the GPU training-over-TCP tests with both gates on;
# 4) 350m under MPS (FSDP NCCL-reducing, pipeline), 3 rounds of 8 steps.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
step() {  # step NAME TIMEOUT LOG cmd...: run cmd under timeout if it fits, else say it was skipped
  local name=$1 to=$2 log=$3; shift 3
  if ! fits "$to"; then echo "=== $name SKIPPED ($(( END - $(date +%s) )) s left < $to)"; return; fi
  local t0=$(date +%s); timeout "$to" "$@" > "$OUT/$log" 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"
}
step "GPU multicast tests" 150 gpu-multicast.log python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py
tail -n 3 $OUT/gpu-multicast.log
G1="HOCCL_NET_LAND_GATES=1+HOCCL_NET_SEND_GATES=1"
F="hoccl,hoccl+$G1,hoccl+HOCCL_NET_LAND_GATES=1,nccl"
P="hoccl,hoccl+$G1,nccl"
export TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=100
for m in mps sliced; do
  flag=""; [ $m = mps ] && flag="--mps"
  for s in fsdp pipeline; do
    a="--batch 4 --reduce nccl --comm $F"; [ $s = pipeline ] && a="--batch 8 --comm $P"
    step "$s small $m" 110 $s-small-$m.log bash scripts/tcp-nodes.sh $flag examples/train_$s.py --size small $a \
      --steps 20 --repeats 5 --json $OUT/$s-small-$m.json
    grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/$s-small-$m.log | tail -n 5
  done
done
step "GPU TCP training tests, gates on" 150 gpu-tcp.log \
  env HOCCL_NET_LAND_GATES=1 HOCCL_NET_SEND_GATES=1 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py
tail -n 3 $OUT/gpu-tcp.log
export TCP_NODES_TIMEOUT=120
C="hoccl,hoccl+$G1,nccl"
step "fsdp 350m mps" 130 fsdp-350m-mps.log bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size 350m \
  --batch 2 --steps 8 --repeats 3 --reduce nccl --comm $C,none --json $OUT/fsdp-350m-mps.json
grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-350m-mps.log | tail -n 5
step "pipeline 350m mps" 130 pipeline-350m-mps.log bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py \
  --size 350m --batch 8 --steps 8 --repeats 3 --comm $C,none --json $OUT/pipeline-350m-mps.json
grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipeline-350m-mps.log | tail -n 5
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
