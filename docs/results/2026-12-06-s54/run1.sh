#!/usr/bin/env bash
# Session 54, run 1: where a HOCCL AllGather call's host time goes, finer than session 53's run 4 (hosttime3.py: the
# checks, the kept list's key and issue, the message's encoding, pickling and socket write, each launch list by its
# driver-call count). First the same call alone (profile_fsdp_hook.py, 6 MiB), then FSDP small under MPS, HOCCL
# against NCCL in one invocation, 3 rounds of 20 steps; then the same on a copy of the tree with session 53's reverted
# commit 2403130 applied (awake.patch: the proxy process looks at its socket for 50 ms after a message instead of
# sleeping in it, so the training thread's write wakes nobody), to see its effect on the write inside the step.
# Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
D=$PWD/docs/results/2026-12-06-s54
T0=$(date +%s)
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
HOSTTIME_OUT=$OUT/alone TCP_NODES_TIMEOUT=60 timeout 70 bash scripts/tcp-nodes.sh --mps $D/hosttime3.py \
  examples/profile_fsdp_hook.py --size 6MiB > $OUT/alone.log 2>&1
echo "=== alone rc=$? $(( $(date +%s) - T0 )) s"; grep -A7 "^AllGather of" $OUT/alone.log | head -12; cat $OUT/alone.rank0.txt
for v in main awake; do
  if [ $v = awake ]; then
    rm -rf /tmp/awake && mkdir /tmp/awake && cp -r hoccl_runtime hoccl_compiler examples scripts /tmp/awake/ &&
      (cd /tmp/awake && patch -p1 -s < $D/awake.patch) || { echo "awake patch failed"; break; }
    cd /tmp/awake; export PYTHONPATH=${TMPDIR:-/tmp}/hoccl-site:/tmp/awake
  fi
  HOSTTIME_OUT=$OUT/step-$v TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps $D/hosttime3.py \
    examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl,nccl --steps 20 --repeats 3 \
    --json $OUT/step-$v.json > $OUT/step-$v.log 2>&1
  echo "=== fsdp small mps $v rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/step-$v.log; cat $OUT/step-$v.rank0.txt
done
cd $OUT && tar czf logs-run1.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
