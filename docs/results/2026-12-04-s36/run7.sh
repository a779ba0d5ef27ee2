#!/usr/bin/env bash
# Session 36, run 7 on the 1x H200: a 1 MiB message cut in two 512 KiB parts (HOCCL_TCP_MIN_PART=524288), the first
# sent by the driving loop and the second by a lane thread at the same time (run 3: the whole 1 MiB's send took
# 215-234 us p50, one socket; session 35's run 1 had this variant at 0.87x / 0.97x against the default's 0.78x /
# 0.87x, once). Traced, under MPS: pipeline small and FSDP small (NCCL reducing).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s36
V="hoccl,hoccl+HOCCL_TCP_MIN_PART=524288,nccl"
export TCP_NODES_TIMEOUT=150
HOCCL_NET_TRACE=$OUT/pipe-mps bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --steps 30 --repeats 3 --comm "$V" --json $OUT/pipe-mps.json > $OUT/pipe-mps.log 2>&1
echo "=== pipeline small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipe-mps.log | tail -n 4
HOCCL_NET_TRACE=$OUT/fsdp-mps bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --comm "$V" --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 4
for w in pipe-mps fsdp-mps; do for g in "" .g1; do python3 $D/frames.py $OUT/$w$g | grep -v "<=4K"; done; done
cd $OUT && tar czf logs-run7.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
