#!/usr/bin/env bash
# Session 21's comparison on the 1x H200 (device tool): HOCCL against NCCL over two TCP nodes sharing GPU 0,
# time-sliced and under MPS (scripts/tcp-nodes.sh), each run bounded; a faulthandler dump of every process still
# running after FH_AFTER seconds (.whl/diag/sitecustomize.py) goes to $OUT/fh_all.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/.whl/diag:$PYTHONPATH FH_AFTER=${FH_AFTER:-110} TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-130}
run() {  # name, [--mps], script, args...
  local name=$1; shift
  local t0=$SECONDS
  bash scripts/tcp-nodes.sh "$@" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $((SECONDS - t0)) s"
  grep -E "^(comm|hoccl|nccl|none) " "$OUT/$name.log" | grep -v "^\[" | tail -n 4
}
F=examples/train_fsdp.py; P=examples/train_pipeline.py
run fsdp-small-sliced $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run pipe-small-sliced $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
run fsdp-350m-sliced $F --size 350m --batch 2 --steps 4 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run fsdp-small-mps --mps $F --size small --steps 10 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
run pipe-small-mps --mps $P --size small --steps 10 --repeats 3 --comm hoccl,nccl
run fsdp-350m-mps --mps $F --size 350m --batch 2 --steps 4 --repeats 3 --comm hoccl,nccl,none --reduce nccl --timeout 60
for f in /tmp/fh-*.txt; do [ -s "$f" ] && { echo "## $f"; cat "$f"; }; done >"$OUT/fh_all.txt" 2>/dev/null
