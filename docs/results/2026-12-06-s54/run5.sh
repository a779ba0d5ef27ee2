#!/usr/bin/env bash
# Session 54, run 5: run 4's two failing GPU tests, test_gpu_torch.py's fsdp check over TCP nodes (over_tcp: two
# ranks, NetCommunicator) and with two nodes of two ranks (NodeNetCommunicator), alone and with their messages, with
# the native kept call (auto) and without (off), to tell whether it is the cause.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s)
W=tests/support/mp_torch_worker.py
for nat in auto off; do
  HOCCL_NET_NATIVE_CALL=$nat HOCCL_GPUS_PER_NODE=1 timeout 100 python3 -m torch.distributed.run --nproc_per_node 2 \
    $W $OUT/tcp-$nat.json fsdp > $OUT/tcp-$nat.log 2>&1
  echo "=== over_tcp fsdp native=$nat rc=$? $(( $(date +%s) - T0 )) s"; cat $OUT/tcp-$nat.json 2>/dev/null | head -30
  grep -E "Error|error|Traceback" $OUT/tcp-$nat.log | grep -v "^\s*$" | head -15
done
for nat in auto; do
  HOCCL_NET_NATIVE_CALL=$nat HOCCL_GPUS_PER_NODE=2 timeout 120 python3 -m torch.distributed.run --nproc_per_node 4 \
    $W $OUT/nodes-$nat.json fsdp > $OUT/nodes-$nat.log 2>&1
  echo "=== two_nodes_of_two fsdp native=$nat rc=$? $(( $(date +%s) - T0 )) s"; cat $OUT/nodes-$nat.json 2>/dev/null | head -30
  grep -E "Error|error|Traceback" $OUT/nodes-$nat.log | head -15
done
cd $OUT && tar czf logs-run5.tgz *.log *.json* 2>/dev/null; rm -rf *.log *.json* cache
echo "=== total $(( $(date +%s) - T0 )) s"
