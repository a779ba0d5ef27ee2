#!/usr/bin/env bash
# Session 22, run 1 on the 1x H200 (device tool): the proxy process (HOCCL_NET_PROXY=process, the new default)
# against NCCL over two TCP nodes sharing GPU 0, small models, time-sliced and under MPS; the proxy thread
# (HOCCL_NET_PROXY=thread, session 21's path) as a reference in separate runs. Every run bounded.
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
HOCCL_NET_PROXY=thread run pipe-small-sliced-thread $P --size small --steps 10 --repeats 2 --comm hoccl
run fsdp-small-sliced $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce hoccl --timeout 60
run pipe-small-mps --mps $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
run fsdp-small-mps --mps $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
HOCCL_NET_PROXY=thread run fsdp-small-mps-thread --mps $F --size small --steps 10 --repeats 2 --comm hoccl --reduce nccl --timeout 60
