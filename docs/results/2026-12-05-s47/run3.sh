#!/usr/bin/env bash
# Session 47, run 3: today's main with the native engine as the default (HOCCL_TCP_ENGINE=auto). The torch backend's
# FSDP, HSDP, reduction and pipeline GPU tests (their TCP nodes now on the native engine: single and several ranks per
# node, the proxy process and its reduce-scatter group), then `tcp-nodes.sh --mps --compare OUT small` (HOCCL /
# NCCL / none, 3 interleaved rounds, CPUs pinned).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
timeout 250 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_torch.py -k "fsdp or reduction or hsdp or pipeline" \
  > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
t0=$(date +%s)
TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=120 timeout 300 bash scripts/tcp-nodes.sh --mps --compare $OUT/mps small > $OUT/compare-mps.txt 2>&1
echo "=== compare small mps rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-mps.txt | grep -v "^torch" | tail -n 20
cd $OUT && tar czf logs-run3.tgz mps compare-mps.txt gputests.log 2>/dev/null; rm -rf mps compare-mps.txt gputests.log
