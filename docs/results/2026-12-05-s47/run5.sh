#!/usr/bin/env bash
# Session 47, run 5 (run 3's H100, warm; one inline command of the device tool): `tcp-nodes.sh --compare OUT small`
# time-sliced on the new default (the native engine), CPUs pinned; then the host's CPU count and model.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=120 timeout 300 bash scripts/tcp-nodes.sh --compare $OUT/sliced small > $OUT/compare-sliced.txt 2>&1
echo "=== compare small sliced rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-sliced.txt | grep -v "^torch" | tail -n 20
nproc; lscpu | grep -E "Model name|MHz" | head -3
cd $OUT && tar czf logs-run5.tgz sliced compare-sliced.txt && rm -rf sliced compare-sliced.txt
