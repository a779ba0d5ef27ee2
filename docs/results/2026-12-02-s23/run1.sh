#!/usr/bin/env bash
# Session 23, run 1 on the 1x H200: eager runs of the network executor (a sender's call ends once its writes left,
# without waiting for the receiver to reach its call). Pipeline small and FSDP small against NCCL in both settings,
# pipeline small traced (HOCCL_NET_TRACE), FSDP 350m with --deterministic (exact losses), the GPU training and
# hostile-peer tests.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-150}
run() {  # name, [--mps], script, args...
  local name=$1; shift
  local t0=$SECONDS
  bash scripts/tcp-nodes.sh "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t0)) s"
  grep -E "^(comm|hoccl|nccl|none) " "$OUT/$name.log" | grep -v "^\[" | tail -n 4
}
F=examples/train_fsdp.py; P=examples/train_pipeline.py
run pipe-small-sliced $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
run pipe-small-mps --mps $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
HOCCL_NET_TRACE=$OUT/trace-sliced run pipe-small-sliced-trace $P --size small --steps 10 --repeats 1 --comm hoccl
run fsdp-small-sliced $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run fsdp-small-mps --mps $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run fsdp-350m-sliced-det $F --size 350m --batch 2 --steps 4 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl \
  --deterministic --timeout 60
t0=$SECONDS; timeout 200 python -m pytest -q tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_hostile.py \
  > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$? $((SECONDS - t0)) s"; tail -n 3 "$OUT/gpu-tests.log"
