#!/usr/bin/env bash
# Session 54, run 6: the fsdp GPU checks over TCP nodes and with two nodes of two again, after the fix of session 53's
# check (its failure message read the missing window's size: run 5), native kept call on (the default); then the
# network executor's GPU tests (test_gpu_internode.py, which run 4 did not reach).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s)
W=tests/support/mp_torch_worker.py
HOCCL_GPUS_PER_NODE=1 timeout 100 python3 -m torch.distributed.run --nproc_per_node 2 $W $OUT/tcp.json fsdp \
  > $OUT/tcp.log 2>&1
echo "=== over_tcp fsdp rc=$? $(( $(date +%s) - T0 )) s"; cat $OUT/tcp.json 2>/dev/null | head -10
HOCCL_GPUS_PER_NODE=2 timeout 120 python3 -m torch.distributed.run --nproc_per_node 4 $W $OUT/nodes.json fsdp \
  > $OUT/nodes.log 2>&1
echo "=== two_nodes_of_two fsdp rc=$? $(( $(date +%s) - T0 )) s"; cat $OUT/nodes.json 2>/dev/null | head -10
timeout 170 python3 -m pytest -v -p no:randomly --durations=8 tests/gpu/test_gpu_internode.py > $OUT/internode.log 2>&1
echo "=== test_gpu_internode rc=$? $(( $(date +%s) - T0 )) s"; grep -E "PASS|FAIL|ERROR|SKIP|passed|failed|s call" \
  $OUT/internode.log | tail -30
cd $OUT && tar czf logs-run6.tgz *.log *.json* 2>/dev/null; rm -rf *.log *.json* cache
echo "=== total $(( $(date +%s) - T0 )) s"
