#!/usr/bin/env bash
# Session 22, run 3 on the 1x H200: where a pipeline send/recv's time goes (HOCCL_NET_TRACE: a row per call from
# each rank's proxy process), the GPU tests of the two-node-on-one-GPU training (tests/gpu/test_gpu_training_tcp.py,
# both settings), then FSDP 350m against NCCL 5 runs in a row per setting (no hang).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-120}
run() {  # name, [--mps], script, args...
  local name=$1; shift
  local t0=$SECONDS
  bash scripts/tcp-nodes.sh "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t0)) s"
  grep -E "^(comm|hoccl|nccl|none) " "$OUT/$name.log" | grep -v "^\[" | tail -n 4
}
F=examples/train_fsdp.py; P=examples/train_pipeline.py
part=${1:-all}  # a: traces, GPU tests, FSDP 350m time-sliced; b: FSDP 350m under MPS
settings=(); [ "$part" != b ] && settings+=(sliced); [ "$part" != a ] && settings+=(mps)
if [ "$part" != b ]; then
HOCCL_NET_TRACE=$OUT/trace-sliced run pipe-small-sliced-trace $P --size small --steps 10 --repeats 1 --comm hoccl
HOCCL_NET_TRACE=$OUT/trace-mps run pipe-small-mps-trace --mps $P --size small --steps 10 --repeats 1 --comm hoccl
t0=$SECONDS; timeout 240 python -m pytest -q tests/gpu/test_gpu_training_tcp.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$? $((SECONDS - t0)) s"; tail -n 3 "$OUT/gpu-tests.log"
fi
for setting in "${settings[@]}"; do
  flag=$([ "$setting" = mps ] && echo --mps)
  for i in 1 2 3 4 5; do
    run "fsdp-350m-$setting-$i" $flag $F --size 350m --batch 2 --steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl --timeout 60
  done
done
