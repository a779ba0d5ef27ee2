#!/usr/bin/env bash
# Session 45, run 1 (session 44's planned-run4, split in two calls): the first GPU run of use_for_fsdp(reduce_group=).
# Ran at commit ad4d086 (hoccl-rsgroup was then a variant; since, hoccl is that and hoccl-onegroup the old hoccl).
# The torch backend's FSDP GPU tests (test_train_fsdp_example trains hoccl and hoccl-rsgroup --deterministic and checks
# their losses equal), then FSDP small and 350m reduced by HOCCL: hoccl / hoccl-rsgroup / nccl (NCCL gathering and
# reducing) / none, 3 interleaved rounds, CPUs pinned. MODES picks the settings (sliced, mps).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
if [ "${TESTS:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout 170 python3 -m pytest -q -x tests/gpu/test_gpu_torch.py -k "fsdp or reduction" > $OUT/gputests.log 2>&1
  echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
fi
V=hoccl,hoccl-rsgroup,nccl,none
for mode in ${MODES:-sliced}; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for size in small 350m; do
    name=fsdp-$size-reduce-hoccl-$mode; t0=$(date +%s)
    case $size in small) a="--batch 4 --steps 20" ;; *) a="--batch 2 --steps 8" ;; esac
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size $size $a \
      --repeats 3 --reduce hoccl --comm $V --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(model|comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 6
  done
done
cd $OUT && tar czf logs-run1-${MODES:-sliced}.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
