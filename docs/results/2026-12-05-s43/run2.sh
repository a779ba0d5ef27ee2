#!/usr/bin/env bash
# Session 43, run 2 on the 1x H200: pipeline small under MPS (HOCCL_NET_ONE_STREAM 0 / 1 / 2 against NCCL), then FSDP
# small (NCCL reducing) in both settings with the same variants and no communication, one invocation per setting,
# CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=1,hoccl+HOCCL_NET_ONE_STREAM=2,nccl"
t0=$(date +%s)
TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=170 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small \
  --batch 8 --steps 20 --repeats 3 --comm "$V" --json $OUT/pipe-mps.json > $OUT/pipe-mps.log 2>&1
echo "=== pipeline small mps, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/pipe-mps.log | tail -n 6
for mode in sliced mps; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=190 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small --batch 4 \
    --steps 20 --repeats 3 --reduce nccl --comm "$V,none" --json $OUT/fsdp-$mode.json > $OUT/fsdp-$mode.log 2>&1
  echo "=== fsdp small $mode, pinned rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/fsdp-$mode.log | tail -n 7
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
