#!/usr/bin/env bash
# Session 53, run 3: no hang on today's main, FSDP 350m (NCCL reducing) against NCCL 5 runs in a row in each setting
# (3 steps each, the first a warm-up: session 44's run 3), CPUs pinned; then the GPU tests of the network runtime's
# multicast plans and of training over TCP nodes (this session changed when a landed chunk's credit leaves).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s)
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for i in 1 2 3 4 5; do
    name=fsdp-350m-$mode-$i; t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=90 timeout 100 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m \
      --batch 2 --steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl --timeout 60 --json $OUT/$name.json \
      > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(hoccl|nccl) " $OUT/$name.log | tail -n 2
  done
done
left=$(( 585 - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  t0=$(date +%s)
  timeout $((left - 15)) python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_multicast.py \
    tests/gpu/test_gpu_training_tcp.py > $OUT/gputests.log 2>&1
  echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
else
  echo "=== gpu tests SKIPPED ($left s left)"
fi
cd $OUT && tar czf logs-run3.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
