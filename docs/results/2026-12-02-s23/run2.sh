#!/usr/bin/env bash
# Session 23, run 2 on the 1x H200: eager runs plus the stream let go once a run's copies are through. The whole
# time-sliced comparison in one command (scripts/tcp-nodes.sh --compare, small and 350m), FSDP 350m with
# --deterministic (exact losses), the GPU training tests.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-200}
t0=$SECONDS; bash scripts/tcp-nodes.sh --compare "$OUT/compare-sliced" small,350m > "$OUT/compare-sliced.txt" 2>&1
echo "=== compare sliced rc=$? $((SECONDS - t0)) s"; cat "$OUT/compare-sliced.txt"
t0=$SECONDS
bash scripts/tcp-nodes.sh examples/train_fsdp.py --size 350m --batch 2 --steps 4 --warmup 1 --repeats 1 \
  --comm hoccl,nccl --reduce nccl --deterministic --timeout 60 --json "$OUT/fsdp-350m-det.json" > "$OUT/fsdp-350m-det.log" 2>&1
echo "=== fsdp 350m deterministic rc=$? $((SECONDS - t0)) s"; grep -E "^(comm|hoccl|nccl) |Error" "$OUT/fsdp-350m-det.log" | tail -n 4
t0=$SECONDS; timeout 150 python -m pytest -q tests/gpu/test_gpu_training_tcp.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$? $((SECONDS - t0)) s"; tail -n 3 "$OUT/gpu-tests.log"
