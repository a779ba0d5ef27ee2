#!/usr/bin/env bash
# PLANNED, NOT YET RUN (session 45's device time ended): the issue's comparison with use_for_fsdp's new default
# (HOCCL's reduce-scatters on a second hoccl group) on the 1x H200, one command per setting, CPUs pinned:
# `tcp-nodes.sh [--mps] --compare OUT small,350m` (FSDP2 reduced by NCCL, then by HOCCL; 1F1B pipeline; HOCCL / NCCL /
# none, 3 interleaved rounds). MODES picks the settings (one call each: each takes about 4-5 minutes). TESTS=1 first
# runs the torch backend's FSDP GPU tests: the worker's FSDP checks (two ranks, over TCP, 2 nodes of 2) have not run
# with the new default (run 1 ran them on the old one; run 3 ran only test_train_fsdp_example on the new).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
if [ "${TESTS:-0}" = 1 ]; then
  t0=$(date +%s)
  timeout 170 python3 -m pytest -q tests/gpu/test_gpu_torch.py -k "fsdp or reduction" > $OUT/gputests.log 2>&1
  echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
fi
for mode in ${MODES:-sliced mps}; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small,350m > $OUT/compare-$mode.txt 2>&1
  echo "=== compare small,350m $mode rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-$mode.txt | grep -v "^torch" | tail -n 36
done
cd $OUT && tar czf logs-run5-$(echo ${MODES:-sliced mps} | tr " " -).tgz */ compare-*.txt gputests.log 2>/dev/null; rm -rf sliced mps compare-*.txt gputests.log
