#!/usr/bin/env bash
# Session 34, run 4 on the 1x H200: network chunks of 2 MiB against the default 8 MiB in training (run 3: 2 MiB chunks
# took 5-17% less time per AllGather of 1-12 MiB a rank under MPS). FSDP small (NCCL and HOCCL reducing) and FSDP 350m
# (HOCCL reducing: the largest transfers, its reduce-scatter's All-to-All), HOCCL against NCCL in each invocation,
# 8 MiB and 2 MiB alternating, in the setting given ($1: mps or sliced).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mode=${1:?mps or sliced}; flag=""; [ $mode = mps ] && flag="--mps"
export TCP_NODES_TIMEOUT=200
for case in "small 4 20 nccl" "small 4 20 hoccl" "350m 2 6 hoccl"; do
  set -- $case
  for chunk in 8388608 2097152; do
    name=fsdp-$1-$4-$mode-$chunk
    HOCCL_NET_CHUNK_BYTES=$chunk bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size $1 --batch $2 --steps $3 \
      --repeats 3 --comm hoccl,nccl --reduce $4 --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "=== $name rc=$?"; grep -E "^(hoccl|nccl) " $OUT/$name.log
  done
done
cd $OUT && tar czf logs-run4-$mode.tgz *.log *.json && rm -f *.log *.json
