#!/usr/bin/env bash
# Session 55, run 2: gatewake.py (how soon a stream held by a host flag goes on once the flag is written), alone and
# beside a second process's matmuls, time-sliced and under MPS.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=$PWD/docs/results/2026-12-06-s55
nvidia-smi -L
for m in sliced mps; do
  if [ $m = mps ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog; mkdir -p /tmp/mps /tmp/mpslog
    nvidia-cuda-mps-control -d; sleep 1
  fi
  echo "=== $m, alone"; timeout 60 python3 $D/gatewake.py probe 300
  echo "=== $m, beside a process's matmuls"
  timeout 90 python3 $D/gatewake.py load 25 & L=$!; sleep 8
  timeout 60 python3 $D/gatewake.py probe 300; wait $L
  [ $m = mps ] && { echo quit | nvidia-cuda-mps-control; sleep 1; }
done
