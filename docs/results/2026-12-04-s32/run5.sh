#!/usr/bin/env bash
# Session 32, run 5 on the 1x H200: why a HOCCL call costs the host 2.5-3.9 times as much inside a pipeline step as
# alone. Pipeline small, HOCCL beside NCCL, under MPS and time-sliced: per-layer host time of HOCCL's calls inside the
# steps (--layers), Python's garbage collector time (all, and inside the calls), and the same with the collector off
# during the timed steps (--gc-off).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for gcflag in "" "--gc-off"; do
    tag=$mode${gcflag:+-gcoff}
    bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
      --no-p2p --layers $gcflag > $OUT/pipe-$tag.log 2>&1
    echo "=== pipeline small $tag rc=$?"; grep -E '^(comm|hoccl|nccl|losses|step layer)' $OUT/pipe-$tag.log
  done
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
