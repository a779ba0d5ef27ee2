#!/usr/bin/env bash
# Session 61, a later device call. An H200: session 60's run1.sh, the issue's comparison at small and 350m in both
# settings (MPS first; a job is skipped when what is left is less than its bound). An H100: the 350m comparison
# under MPS only (`tcp-nodes.sh --mps --compare OUT 350m`), a 350m data point on another host.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L
if nvidia-smi -L | grep -q H200; then
  JOBS="small:mps 350m:mps small:sliced 350m:sliced" RUN_TESTS=0 RUN_BUDGET_S=${RUN_BUDGET_S:-560} \
    bash "$here/../2026-12-06-s60/run1.sh"; exit $?
fi
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200
T0=$(date +%s)
timeout 230 bash scripts/tcp-nodes.sh --mps --compare $OUT/350m-mps 350m > $OUT/350m-mps.log 2>&1
echo "=== compare 350m mps rc=$? $(( $(date +%s) - T0 )) s"
sed -n '/^=== HOCCL/,$p' $OUT/350m-mps.log
cd $OUT && tar czf logs-go2.tgz *.log 350m-* 2>/dev/null; rm -rf *.log 350m-* cache
