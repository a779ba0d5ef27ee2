#!/usr/bin/env bash
# PLANNED in session 44; it ran, split in two calls, as session 45's run1.sh (docs/results/2026-12-05-s45/).
# On the 1x H200 (or H100: rerun the baselines in the same call), CPUs pinned: the torch backend's GPU tests (among
# them test_train_fsdp_example, which now trains hoccl and hoccl-rsgroup and checks their losses equal), then FSDP
# small and 350m reduced by HOCCL, hoccl / hoccl-rsgroup / nccl (NCCL gathering, HOCCL reducing) / none, both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
timeout 200 python3 -m pytest -q tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
V=hoccl,hoccl-rsgroup,nccl,none
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for size in small 350m; do
    name=fsdp-$size-reduce-hoccl-$mode; t0=$(date +%s)
    case $size in small) a="--batch 4 --steps 20" ;; *) a="--batch 2 --steps 8" ;; esac
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size $size $a \
      --repeats 3 --reduce hoccl --comm $V --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 5
  done
done
cd $OUT && tar czf logs-run4.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
