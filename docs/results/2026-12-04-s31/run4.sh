#!/usr/bin/env bash
# Session 31, run 4 on the 1x H200: dist.batch_isend_irecv issuing a hoccl group's batch when it returns
# (HOCCL_BATCH_ISSUE=1, the new default) against at its first wait (0, as before), pipeline small, HOCCL / NCCL in the
# same run, under MPS and time-sliced (profile_pipeline.py part 2: step, CPU, host ms in calls and in waits).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for issue in 1 0; do
    HOCCL_BATCH_ISSUE=$issue bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 \
      --repeats 3 --comm hoccl,nccl --no-p2p > $OUT/pipe-$mode-issue$issue.log 2>&1
    echo "=== pipeline small $mode HOCCL_BATCH_ISSUE=$issue rc=$?"
    grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-$mode-issue$issue.log
  done
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
