#!/usr/bin/env bash
# Session 46, run 4 (the session's last device seconds): FSDP small under MPS on today's main, traced
# (HOCCL_NET_TRACE), HOCCL / NCCL (NCCL reducing), 3 interleaved rounds of 20 steps, CPUs pinned; for agchain.py.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; nvidia-smi -L
t0=$(date +%s)
HOCCL_NET_TRACE=$OUT/fsdp-mps TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
  --size small --batch 4 --steps 20 --repeats 3 --reduce nccl --comm hoccl,nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps traced rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl)" $OUT/fsdp-mps.log | tail -n 3
python3 docs/results/2026-12-05-s46/agchain.py $OUT/fsdp-mps 2>&1 | tail -8
cd $OUT && tar czf logs-run4.tgz *.log *.json *.csv 2>/dev/null; rm -f *.log *.json *.csv
