#!/usr/bin/env bash
# Session 43, run 1 on the 1x H200 (session 42's planned runs 1 and 2, half of it): the GPU tests of training over TCP
# nodes (HOCCL_NET_ONE_STREAM 0/1/2, the --gc-every checks), of the torch backend and of the network runtime; then
# pipeline small time-sliced, HOCCL_NET_ONE_STREAM 0 / 1 / 2 against NCCL in one invocation, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
timeout 330 python3 -m pytest -q --durations=12 tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py \
  tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -12
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=1,hoccl+HOCCL_NET_ONE_STREAM=2,nccl"
for mode in sliced; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small \
    --batch 8 --steps 20 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/pipe-$mode.log | tail -n 6
done
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
