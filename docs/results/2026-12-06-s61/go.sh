#!/usr/bin/env bash
# Session 61, first device call. An H200 (the issue's machine; none has come for today's defaults since session 56):
# session 60's run1.sh, the issue's comparison at small and 350m in both settings. An H100: the multicast GPU tests
# (their node-process test now draws fresh inputs for every run: not yet run on a GPU), then the run that tests
# session 60's hypothesis for FSDP small with HOCCL reducing under MPS (HOCCL's two groups' spinning lanes crowd the
# node's pinned CPUs): the HOCCL variant with lanes that block at once (HOCCL_TCP_SPIN_US=0), with 4 lanes, with both
# of its collectives on one group (hoccl-onegroup), beside the default and NCCL, in interleaved rounds of 100 steps.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L
if nvidia-smi -L | grep -q H200; then
  JOBS="small:mps small:sliced 350m:mps 350m:sliced" RUN_TESTS=0 RUN_BUDGET_S=570 \
    bash "$here/../2026-12-06-s60/run1.sh"; exit $?
fi
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s)
timeout 150 python3 -m pytest -q -rA -p no:randomly tests/gpu/test_gpu_multicast.py > $OUT/gpu-multicast.log 2>&1
echo "=== multicast GPU tests rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/gpu-multicast.log | cut -c1-400
grep -E "^(PASSED|FAILED|ERROR)" $OUT/gpu-multicast.log | head -20 | cut -c1-300
V="hoccl,hoccl-onegroup,hoccl+HOCCL_TCP_SPIN_US=0,hoccl+HOCCL_NET_LANES=4,nccl"
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  [ $(( T0 + 580 - $(date +%s) )) -lt 190 ] && { echo "=== spin/lanes $m SKIPPED"; continue; }
  TCP_NODES_TIMEOUT=180 timeout 190 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small --batch 4 \
    --steps 100 --repeats 3 --reduce hoccl --comm $V --gc-every 50 --json $OUT/spin-$m.json > $OUT/spin-$m.log 2>&1
  echo "=== FSDP small HOCCL reducing, spin/lanes variants, $m: rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^(comm|hoccl|nccl|none)[ +-]" $OUT/spin-$m.log | tail -n 8
done
cd $OUT && tar czf logs-go.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
