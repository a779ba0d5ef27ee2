#!/usr/bin/env bash
# Session 35, run 1 on the 1x H200: which proxy/transport settings move the small rows, as variants of one
# invocation (examples/variants.py), pipeline small and FSDP small (NCCL reducing), under MPS and time-sliced:
#   direct: HOCCL_TCP_DIRECT_BYTES=2 MiB (a write into an idle lane leaves from the driving loop, no lane hand-off)
#   switch: HOCCL_NET_SWITCH_US=5 (the proxy process's interpreter switch interval)
#   split:  1 MiB writes cut in two 512 KiB parts, the first sent by the driving loop, the other by a lane thread
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_TCP_DIRECT_BYTES=2097152,hoccl+HOCCL_NET_SWITCH_US=5"
V="$V,hoccl+HOCCL_TCP_MIN_PART=524288+HOCCL_TCP_DIRECT_BYTES=524288,nccl,none"
export TCP_NODES_TIMEOUT=180
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small --batch 8 --steps 30 --repeats 4 \
    --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-$mode.log | tail -n 8
done
bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 3 \
  --comm "hoccl,hoccl+HOCCL_TCP_DIRECT_BYTES=2097152,hoccl+HOCCL_NET_SWITCH_US=5,nccl,none" --reduce nccl \
  --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 8
cd $OUT && tar czf logs-run1.tgz *.log *.json && rm -f *.log *.json
