#!/usr/bin/env bash
# Session 44, run 3 on the 1x H200 (the call got a 1x H100): no hang, FSDP 350m against NCCL 5 runs in a row in each setting (3 steps
# each, the first a warm-up, as session 22's run 3), CPUs pinned; then the GPU tests session 43's run 1 did not reach (the
# torch backend and the network runtime).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for i in 1 2 3 4 5; do
    name=fsdp-350m-$mode-$i; t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=90 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m --batch 2 \
      --steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl --timeout 60 --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(hoccl|nccl) " $OUT/$name.log | tail -n 2
  done
done
t0=$(date +%s)
timeout 150 python3 -m pytest -q tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
cd $OUT && tar czf logs-run3.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
