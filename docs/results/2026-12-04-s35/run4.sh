#!/usr/bin/env bash
# Session 35, run 4 on the 1x H200: the proxy process's interpreter switch interval (run 3: its 10 us poll sleeps
# lasted a median longest 121 us per call, against 15 us in a process of its own: its threads wait for the GIL), and
# fewer lanes (fewer threads), as variants of one invocation: pipeline small (MPS, time-sliced), FSDP small (MPS).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_SWITCH_US=5,hoccl+HOCCL_NET_SWITCH_US=20,hoccl+HOCCL_NET_SWITCH_US=5+HOCCL_NET_LANES=2,nccl"
export TCP_NODES_TIMEOUT=180
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small --batch 8 --steps 30 --repeats 4 \
    --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-$mode.log | tail -n 8
done
bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 4 \
  --comm "$V" --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 8
cd $OUT && tar czf logs-run4.tgz *.log *.json && rm -f *.log *.json
