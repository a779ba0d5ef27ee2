#!/usr/bin/env bash
# Session 56, run 3: the GPU tests of the network path on today's main: tests/gpu/test_gpu_training_tcp.py (FSDP and
# pipeline over two TCP nodes on GPU 0 against NCCL, both settings) as the defaults stand, and
# tests/gpu/test_gpu_internode.py with the native lanes spinning (HOCCL_TCP_SPIN_US=300; poisoned outputs).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
T0=$(date +%s)
timeout 280 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py > $OUT/training-tcp.log 2>&1
echo "=== test_gpu_training_tcp rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/training-tcp.log | cut -c1-300
HOCCL_TCP_SPIN_US=300 timeout 200 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_internode.py > $OUT/internode-spin.log 2>&1
echo "=== test_gpu_internode HOCCL_TCP_SPIN_US=300 rc=$? $(( $(date +%s) - T0 )) s"; tail -n 3 $OUT/internode-spin.log | cut -c1-300
cd $OUT && tar czf logs-run3.tgz *.log 2>/dev/null; rm -rf *.log cache
echo "=== total $(( $(date +%s) - T0 )) s"
