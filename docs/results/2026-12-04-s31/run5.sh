#!/usr/bin/env bash
# Session 31, run 5 on the 1x H200: how much a call's host cost moves pipeline small's step. NCCL's pipeline with
# each batch_isend_irecv slowed by a 300 us busy wait (host work, GIL held) beside NCCL as it is and HOCCL, in the
# same rounds, under MPS and time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 3 --comm hoccl,nccl \
    --no-p2p --host-delay-us 300 > $OUT/pipe-$mode-delay.log 2>&1
  echo "=== pipeline small $mode, NCCL +300 us a call rc=$?"
  grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-$mode-delay.log
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
