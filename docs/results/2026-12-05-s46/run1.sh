#!/usr/bin/env bash
# Session 46, run 1 (session 45's planned-run5, split into one call per part), on the 1x H200 (or whatever card the
# device tool serves: nvidia-smi -L prints it). PART=tests: the torch backend's FSDP and HSDP GPU tests (the worker's
# FSDP checks over TCP and as 2 nodes of 2, and the new HSDP check, have not run on use_for_fsdp's second-group
# default). PART=sliced / mps: `tcp-nodes.sh [--mps] --compare OUT small,350m` (FSDP2 reduced by NCCL, then by HOCCL;
# 1F1B pipeline; HOCCL / NCCL / none, 3 interleaved rounds, CPUs pinned).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
case ${PART:-tests} in
  tests)
    t0=$(date +%s)
    timeout 420 python3 -m pytest -q tests/gpu/test_gpu_torch.py -k "fsdp or reduction or hsdp" > $OUT/gputests.log 2>&1
    echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR|hsdp" $OUT/gputests.log | tail -12 ;;
  sliced|mps)
    mode=$PART; t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small,350m > $OUT/compare-$mode.txt 2>&1
    echo "=== compare small,350m $mode rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-$mode.txt | grep -v "^torch" | tail -n 40 ;;
esac
cd $OUT && tar czf logs-run1-${PART:-tests}.tgz */ compare-*.txt gputests.log 2>/dev/null; rm -rf sliced mps compare-*.txt gputests.log
