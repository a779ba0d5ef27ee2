#!/usr/bin/env bash
# (HOCCL_NET_POST_PAUSE existed from commit d8015dd until it was removed after run 3.)
# Session 36, run 2 on the 1x H200: run 1's frames put 88-130 us (p50) between a write's post by the proxy's driving
# loop and its lane thread's send, and 85-167 us between the send's end and the receiving thread's return: the
# threads wait for the interpreter, which the loop holds through its next turns. Variants of one invocation, traced:
# the default; HOCCL_NET_POST_PAUSE=1 (the loop sleeps a poll interval after a turn that posted writes);
# HOCCL_TCP_DIRECT_BYTES=2097152 (the loop sends writes of up to 2 MiB itself, no hand-off); 4 lanes; NCCL.
# Pipeline small and FSDP small (NCCL reducing), under MPS and time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s36; S=docs/results/2026-12-04-s35
V="hoccl,hoccl+HOCCL_NET_POST_PAUSE=1,hoccl+HOCCL_TCP_DIRECT_BYTES=2097152,hoccl+HOCCL_NET_LANES=4,nccl"
export TCP_NODES_TIMEOUT=300
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  HOCCL_NET_TRACE=$OUT/pipe-$mode bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small --batch 8 \
    --steps 30 --repeats 3 --comm "$V" --json $OUT/pipe-$mode.json > $OUT/pipe-$mode.log 2>&1
  echo "=== pipeline small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-$mode.log | tail -n 6
  HOCCL_NET_TRACE=$OUT/fsdp-$mode bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small --batch 4 \
    --steps 20 --repeats 3 --comm "$V" --reduce nccl --json $OUT/fsdp-$mode.json > $OUT/fsdp-$mode.log 2>&1
  echo "=== fsdp small $mode rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-$mode.log | tail -n 6
done
for w in pipe-mps fsdp-mps pipe-sliced fsdp-sliced; do
  for g in "" .g1 .g2 .g3; do
    python3 $S/stalls.py $OUT/$w$g 2>&1 | grep -E "sleep|turn" | head -2
    python3 $D/frames.py $OUT/$w$g | grep -v "<=4K"
  done
done
cd $OUT && tar czf logs-run2.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
