#!/usr/bin/env bash
# Session 22, run 2 on the 1x H200: the proxy process polling every 10 us (HOCCL_NET_POLL_US) with small TCP writes
# sent from the driving thread (HOCCL_TCP_DIRECT_BYTES) against NCCL, both settings; one A/B run with the old poll and
# hand-offs (50 us, 0) beside it, and 1 MiB chunks (HOCCL_NET_CHUNK_BYTES).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-170}
run() {  # name, [--mps], script, args...
  local name=$1; shift
  local t0=$SECONDS
  bash scripts/tcp-nodes.sh "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t0)) s"
  grep -E "^(comm|hoccl|nccl|none) " "$OUT/$name.log" | grep -v "^\[" | tail -n 4
}
F=examples/train_fsdp.py; P=examples/train_pipeline.py
run pipe-small-sliced $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
HOCCL_NET_POLL_US=50 HOCCL_TCP_DIRECT_BYTES=0 run pipe-small-sliced-poll50 $P --size small --steps 10 --repeats 2 --comm hoccl
HOCCL_NET_CHUNK_BYTES=1048576 run pipe-small-sliced-chunk1m $P --size small --steps 10 --repeats 2 --comm hoccl
HOCCL_NET_CHUNK_BYTES=1048576 run pipe-small-mps-chunk1m --mps $P --size small --steps 10 --repeats 2 --comm hoccl
run pipe-small-mps --mps $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
run fsdp-small-sliced $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run fsdp-small-mps --mps $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run pipe-350m-sliced $P --size 350m --steps 6 --repeats 3 --comm hoccl,nccl
run fsdp-350m-sliced $F --size 350m --batch 2 --steps 4 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run fsdp-350m-mps --mps $F --size 350m --batch 2 --steps 4 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
# hoccl-run (issue 38): plan files as hoccl-compile writes them, ranks sharing GPU 0: one node, 2 nodes of 1, 2 of 2
PL=docs/results/2026-12-02-s22/plans
for p in ag-1x2 a2a-1x2; do echo "=== hoccl-run $p"; timeout 120 python -m hoccl_bench.run $PL/$p.json --iters 10 2>&1 | tail -3; echo "rc=$?"; done
for p in ag-2x1 a2a-2x2 bc-2x2; do echo "=== hoccl-run $p (tcp-nodes)"; TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh hoccl_bench/run.py $PL/$p.json --iters 10 2>&1 | grep -v "^\[\|Warning\|warn" | tail -5; done
