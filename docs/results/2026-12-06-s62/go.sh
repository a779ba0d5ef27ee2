#!/usr/bin/env bash
# Session 62, a device call. First the multicast GPU tests (tests/gpu/test_gpu_multicast.py): since this session a
# multicast AllGather across nodes deals each GPU's copies over its DMA queue and its dma_recv queue, which the GPU
# network executor runs on a copy stream of their own; 2 nodes of 2 ranks share the one GPU there. Then, on an H200
# (the issue's machine), session 60's run1.sh: `tcp-nodes.sh [--mps] --compare OUT small|350m` in both settings as
# the budget allows; on an H100, the 350m comparison under MPS (session 61's go2.sh H100 branch).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L
T0=$(date +%s)
export HOCCL_CACHE_DIR=$OUT/cache
timeout 170 python3 -m pytest -q -rA -p no:randomly tests/gpu/test_gpu_multicast.py > $OUT/gpu-multicast.log 2>&1
echo "=== multicast GPU tests rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/gpu-multicast.log | cut -c1-400
grep -E "^(PASSED|FAILED|ERROR)" $OUT/gpu-multicast.log | head -20 | cut -c1-300
if nvidia-smi -L | grep -q H200; then
  JOBS="small:mps 350m:mps small:sliced 350m:sliced" RUN_TESTS=0 RUN_BUDGET_S=$(( 585 - ($(date +%s) - T0) )) \
    bash "$here/../2026-12-06-s60/run1.sh"; exit $?
fi
export TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200
[ $(( T0 + 585 - $(date +%s) )) -lt 235 ] && { echo "=== 350m mps SKIPPED"; exit 0; }
timeout 230 bash scripts/tcp-nodes.sh --mps --compare $OUT/350m-mps 350m > $OUT/350m-mps.log 2>&1
echo "=== compare 350m mps rc=$? $(( $(date +%s) - T0 )) s"
sed -n '/^=== HOCCL/,$p' $OUT/350m-mps.log
cd $OUT && tar czf logs-go.tgz *.log 350m-* 2>/dev/null; rm -rf 350m-* cache 350m-mps.log
