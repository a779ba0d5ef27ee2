#!/usr/bin/env bash
# Session 43, run 2 on one GPU: 350m, both settings, CPUs pinned: FSDP (NCCL reducing) and 1F1B pipelining, HOCCL as
# it is and with HOCCL_NET_ONE_STREAM=${ONE:-2} against NCCL and no communication, one invocation per run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=${ONE:-2},nccl,none"
for mode in sliced mps; do
  flag=""; [ $mode = mps ] && flag="--mps"
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=130 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size 350m \
    --batch 8 --steps 8 --repeats 3 --comm "$V" --json $OUT/pipe350-$mode.json > $OUT/pipe350-$mode.log 2>&1
  echo "=== pipeline 350m $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/pipe350-$mode.log | tail -n 6
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=130 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size 350m --batch 2 \
    --steps 8 --repeats 3 --reduce nccl --comm "$V" --json $OUT/fsdp350-$mode.json > $OUT/fsdp350-$mode.log 2>&1
  echo "=== fsdp 350m $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/fsdp350-$mode.log | tail -n 7
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
