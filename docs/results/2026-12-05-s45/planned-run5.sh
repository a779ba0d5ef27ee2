#!/usr/bin/env bash
# PLANNED, NOT YET RUN (session 45's device time ended): the issue's comparison with use_for_fsdp's new default
# (HOCCL's reduce-scatters on a second hoccl group) on the 1x H200, one command per setting, CPUs pinned:
# `tcp-nodes.sh [--mps] --compare OUT small,350m` (FSDP2 reduced by NCCL, then by HOCCL; 1F1B pipeline; HOCCL / NCCL /
# none, 3 interleaved rounds). MODES picks the settings (one call each: each takes about 4-5 minutes).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
for mode in ${MODES:-sliced mps}; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small,350m > $OUT/compare-$mode.txt 2>&1
  echo "=== compare small,350m $mode rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-$mode.txt | grep -v "^torch" | tail -n 36
done
cd $OUT && tar czf logs-run5-$(echo ${MODES:-sliced mps} | tr " " -).tgz */ compare-*.txt 2>/dev/null && rm -rf sliced mps compare-*.txt
