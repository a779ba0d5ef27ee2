#!/usr/bin/env bash
# (HOCCL_NET_POST_PAUSE existed from commit d8015dd until it was removed after run 3.)
# Session 36, run 3 on the 1x H200: the default HOCCL_TCP_DIRECT_BYTES raised to 1 MiB (run 2: whole 1 MiB writes
# sent by the driving loop cut a pipeline message's post->landing from 504 to 346 us p50 under MPS, 685 to 377
# time-sliced), against the old 256 KiB in the same invocation, and HOCCL_NET_POST_PAUSE=1 once more; NCCL beside.
# Pipeline small and FSDP small (NCCL reducing), under MPS and time-sliced, traced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s36
V="hoccl,hoccl+HOCCL_TCP_DIRECT_BYTES=262144,hoccl+HOCCL_NET_POST_PAUSE=1,nccl"
export TCP_NODES_TIMEOUT=300
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  HOCCL_NET_TRACE=$OUT/pipe-$mode bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small --batch 8 \
    --steps 30 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-$mode.log | tail -n 5
  HOCCL_NET_TRACE=$OUT/fsdp-$mode bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small --batch 4 \
    --steps 20 --repeats 3 --comm "$V" --reduce nccl --json $OUT/fsdp-$mode.json > $OUT/fsdp-$mode.log 2>&1
  echo "=== fsdp small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-$mode.log | tail -n 5
done
for w in pipe-mps fsdp-mps pipe-sliced fsdp-sliced; do
  for g in "" .g1 .g2; do
    python3 $D/frames.py $OUT/$w$g | grep -v "<=4K"
  done
done
cd $OUT && tar czf logs-run3.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
