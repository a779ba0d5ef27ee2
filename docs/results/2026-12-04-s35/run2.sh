#!/usr/bin/env bash
# Session 35, run 2 on the 1x H200: where HOCCL's slow steps come from. FSDP small (NCCL reducing) under MPS and
# pipeline small time-sliced, HOCCL against NCCL, with the proxy's trace (its loop's longest gap per call, its
# garbage collections: stalls.py) and a clock on the training processes' garbage collections (gcwrap.py).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s35
export TCP_NODES_TIMEOUT=180
HOCCL_NET_TRACE=$OUT/fsdp bash scripts/tcp-nodes.sh --mps $D/gcwrap.py examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --comm hoccl,nccl --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]|^gc rank" $OUT/fsdp-mps.log | tail -n 12
python3 $D/stalls.py $OUT/fsdp
HOCCL_NET_TRACE=$OUT/pipe bash scripts/tcp-nodes.sh $D/gcwrap.py examples/train_pipeline.py --size small --batch 8 \
  --steps 30 --repeats 3 --comm hoccl,nccl --json $OUT/pipe-sliced.json > $OUT/pipe-sliced.log 2>&1
echo "=== pipeline small sliced rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]|^gc rank" $OUT/pipe-sliced.log | tail -n 12
python3 $D/stalls.py $OUT/pipe
cd $OUT && tar czf logs-run2.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
