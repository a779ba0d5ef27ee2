#!/usr/bin/env bash
# Session 35, run 9 on the 1x H200: are the proxy loop's long poll sleeps (runs 3 and 8: a median longest 121-136 us
# per call, against 15 us in a process of its own) waits for the interpreter? The same traced FSDP small (NCCL
# reducing, MPS) as run 3, with the proxy process's switch interval at 5 us (HOCCL_NET_SWITCH_US=5).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s35
HOCCL_NET_SWITCH_US=5 HOCCL_NET_TRACE=$OUT/fsdp TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh --mps \
  examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 3 --comm hoccl,nccl --reduce nccl \
  --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 4
python3 $D/stalls.py $OUT/fsdp
cd $OUT && tar czf logs-run9.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
