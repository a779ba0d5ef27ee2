#!/usr/bin/env bash
# Session 55, run 6: the user's comparison as docs/training.md gives it, on this main (--compare's new defaults:
# --gc-every 50, 30 steps a round at small, 3 rounds): `tcp-nodes.sh [--mps] --compare OUT small` under MPS, then
# time-sliced: FSDP small NCCL-reducing, FSDP small HOCCL-reducing, pipeline small 1F1B, each hoccl / nccl / none.
# CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=100
T0=$(date +%s)
timeout 230 bash scripts/tcp-nodes.sh --mps --compare $OUT/mps small > $OUT/compare-mps.out 2>&1
echo "=== mps rc=$? $(( $(date +%s) - T0 )) s"; grep -v "^\[" $OUT/compare-mps.out | grep -E "^(===|comm|hoccl|nccl|none)" 
T1=$(date +%s)
timeout $(( 470 - (T1 - T0) )) bash scripts/tcp-nodes.sh --compare $OUT/sliced small > $OUT/compare-sliced.out 2>&1
echo "=== sliced rc=$? $(( $(date +%s) - T0 )) s"; grep -v "^\[" $OUT/compare-sliced.out | grep -E "^(===|comm|hoccl|nccl|none)"
cd $OUT && tar czf logs-run6.tgz compare-*.out mps sliced 2>/dev/null; rm -rf mps sliced cache compare-*.out
