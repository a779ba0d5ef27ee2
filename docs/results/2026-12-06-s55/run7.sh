#!/usr/bin/env bash
# Session 55, run 7: copyprobe.py, copies between the GPU and cuMemHostAlloc memory against the proxy's memfd arena
# registered with cuMemHostRegister, alone and under MPS beside another process's matmuls (gatewake.py's load).
set -u
D=$PWD/docs/results/2026-12-06-s55
nvidia-smi -L
echo "=== time-sliced, alone"; timeout 60 python3 $D/copyprobe.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog; mkdir -p /tmp/mps /tmp/mpslog
nvidia-cuda-mps-control -d; sleep 1
timeout 60 python3 $D/gatewake.py load 20 & L=$!; sleep 6
echo "=== MPS, beside a process's matmuls"; timeout 50 python3 $D/copyprobe.py; wait $L
echo quit | nvidia-cuda-mps-control
