#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU machine was lent in session 42; kept for a later session (it supersedes session 41's
# planned-run2.sh). Run 2 on the 1x H200: pipeline small with a call's copies on its caller's stream
# (HOCCL_NET_ONE_STREAM=1: a 1F1B exchange 6 driver calls instead of 11; 2: also no DONE wait), beside the default
# and NCCL, in one invocation per setting, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=1,hoccl+HOCCL_NET_ONE_STREAM=2,nccl"
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=270 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small \
    --batch 8 --steps 20 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode, pinned rc=$?"; grep -E "^(comm|hoccl|nccl|rank)" $OUT/pipe-$mode.log | tail -n 6
done
cd $OUT && tar czf logs-run2.tgz *.log *.json && rm -f *.log *.json
