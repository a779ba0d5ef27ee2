#!/usr/bin/env bash
# Session 54, run 4: the GPU tests of the network paths and the torch backend (run 3 cut them at 150 s), verbose with
# durations; then FSDP small and pipeline small under MPS, 5 rounds of 20 steps, HOCCL with the native kept call
# (the default) and without (HOCCL_NET_NATIVE_CALL=off), NCCL, and no communication (none: the limit), in one
# invocation each. Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
timeout 330 python3 -m pytest -v -p no:randomly --durations=12 tests/gpu/test_gpu_training_tcp.py \
  tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|s call" $OUT/gputests.log | tail -60
V=hoccl,hoccl+HOCCL_NET_NATIVE_CALL=off,nccl,none
fits 110 && { TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small \
  --batch 4 --reduce nccl --comm $V --steps 20 --repeats 5 --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
  echo "=== fsdp small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-mps.log; }
fits 70 && { TCP_NODES_TIMEOUT=60 timeout 70 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small \
  --batch 8 --comm $V --steps 20 --repeats 5 --json $OUT/pipeline-mps.json > $OUT/pipeline-mps.log 2>&1
  echo "=== pipeline small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-mps.log; }
cd $OUT && tar czf logs-run4.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
