#!/usr/bin/env bash
# Session 36, run 1 on the 1x H200: where a 1 MiB TCP write's time goes inside training (session 35: a pipeline
# exchange's 1 MiB took 0.8-1.0 ms from the peer's post to its landing, against ~0.3 ms on an idle host). Each
# write's post, each frame's send and landing are traced (PREFIX.rankN.frames.csv, frames.py), per variant: the
# default, HOCCL_TCP_RECEIVE=poll (no receiving threads), HOCCL_NET_LANES=1 (2 lane threads instead of 16), and NCCL.
# Pipeline small and FSDP small (NCCL reducing), under MPS.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s36; S=docs/results/2026-12-04-s35
V="hoccl,hoccl+HOCCL_TCP_RECEIVE=poll,hoccl+HOCCL_NET_LANES=1,nccl"
export TCP_NODES_TIMEOUT=240
HOCCL_NET_TRACE=$OUT/pipe bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --steps 30 --repeats 3 --comm "$V" --json $OUT/pipe-mps.json > $OUT/pipe-mps.log 2>&1
echo "=== pipeline small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-mps.log | tail -n 6
HOCCL_NET_TRACE=$OUT/fsdp bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 --steps 20 \
  --repeats 3 --comm "$V" --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 6
for w in pipe fsdp; do
  for g in "" .g1 .g2; do
    python3 $S/stalls.py $OUT/$w$g 2>&1 | grep -E "rank|sleep|turn"
    python3 $D/frames.py $OUT/$w$g
  done
done
cd $OUT && tar czf logs-run1.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
