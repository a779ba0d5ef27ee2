#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU machine was lent in session 42; kept for a later session. Run 3 on the 1x H200: FSDP
# small (NCCL reducing) with HOCCL_NET_ONE_STREAM=1 and 2 beside the default, NCCL and no communication, in one
# invocation per setting, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=1,hoccl+HOCCL_NET_ONE_STREAM=2,nccl,none"
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=270 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small --batch 4 \
    --steps 20 --repeats 3 --reduce nccl --comm "$V" --json $OUT/fsdp-$mode.json > $OUT/fsdp-$mode.log 2>&1
  echo "=== fsdp small $mode, pinned rc=$?"; grep -E "^(comm|hoccl|nccl|none|rank)" $OUT/fsdp-$mode.log | tail -n 6
done
cd $OUT && tar czf logs-run3.tgz *.log *.json && rm -f *.log *.json
