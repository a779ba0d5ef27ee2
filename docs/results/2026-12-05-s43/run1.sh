#!/usr/bin/env bash
# Session 43, run 1 on one GPU (session 42's planned runs 1-3 in one call): the GPU tests of training over TCP nodes
# (HOCCL_NET_ONE_STREAM 0/1/2, the --gc-every checks), of the torch backend and of the network runtime; then pipeline
# small and FSDP small (NCCL reducing), HOCCL_NET_ONE_STREAM 0 / 1 / 2 against NCCL (FSDP: and no communication) in
# one invocation per setting, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
timeout 270 python3 -m pytest -q --durations=12 tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py \
  tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -12
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=1,hoccl+HOCCL_NET_ONE_STREAM=2,nccl"
for mode in sliced mps; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=75 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small \
    --batch 8 --steps 20 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/pipe-$mode.log | tail -n 6
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=80 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small --batch 4 \
    --steps 20 --repeats 3 --reduce nccl --comm "$V,none" --json $OUT/fsdp-$mode.json > $OUT/fsdp-$mode.log 2>&1
  echo "=== fsdp small $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/fsdp-$mode.log | tail -n 7
done
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
