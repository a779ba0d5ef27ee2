#!/usr/bin/env bash
# Session 34, run 2 on the 1x H200: the AllGather at FSDP small's sizes (1, 3, 8 MiB a rank) under MPS, the stream
# held so the host's enqueue is not timed (agbench.py), under network settings: the default, 1 and 2 MiB chunks,
# 2 and 4 lanes, 256 KiB parts, a 2 us poll. One invocation each; NCCL is timed in every one (its own drift).
# (run 2 ran agbench.py's second form: the stream held, one hoccl group per invocation, rank 0's time. The file now
# is run 3's form: hoccl groups of several chunk sizes in one process, the shorter rank's time.)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
d=docs/results/2026-12-04-s34
export TCP_NODES_TIMEOUT=120
for cfg in default HOCCL_NET_CHUNK_BYTES=1048576 HOCCL_NET_CHUNK_BYTES=2097152 HOCCL_NET_LANES=2 HOCCL_NET_LANES=4 \
           HOCCL_TCP_MIN_PART=262144 HOCCL_NET_POLL_US=2; do
  env $([ $cfg = default ] || echo $cfg) bash scripts/tcp-nodes.sh --mps $d/agbench.py --sizes 1,3,8 --repeats 11 \
    > $OUT/ag-$cfg.log 2>&1
  echo "=== $cfg rc=$?"; grep -A10 "^AllGather over" $OUT/ag-$cfg.log | grep -v "^AllGather\|MiB/rank"
done
cd $OUT && tar czf logs-run2.tgz *.log && rm -f *.log
