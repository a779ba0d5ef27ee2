#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU machine was lent in session 41 (every start failed); kept for a later session.
# Session 41, run 2 on the 1x H200: pipeline small with network chunks of 512 and 256 KiB beside the default 2 MiB
# (a 1 MiB message then crosses in 2 or 4 pipelined chunks, as NCCL's socket transport moves it in 512 KiB steps),
# NCCL beside, in one invocation per setting, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_CHUNK_BYTES=524288,hoccl+HOCCL_NET_CHUNK_BYTES=262144,nccl"
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=240 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small \
    --batch 8 --steps 20 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode, pinned rc=$?"; grep -E "^(comm|hoccl|nccl|rank)" $OUT/pipe-$mode.log | tail -n 6
done
cd $OUT && tar czf logs-run2.tgz *.log *.json && rm -f *.log *.json
