#!/usr/bin/env bash
# Session 25, run 4 on the 1x H200: the small rows again on today's code (FSDP small with NCCL and with HOCCL
# reducing, pipeline small 1F1B), 3 interleaved rounds, both settings; what the command was, as one script.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=120
for s in mps sliced; do
  m=(); [ $s = mps ] && m=(--mps)
  for r in nccl hoccl; do
    bash scripts/tcp-nodes.sh "${m[@]}" examples/train_fsdp.py --size small --steps 20 --repeats 3 --comm hoccl,nccl \
      --reduce $r --timeout 100 --json $OUT/fsdp-small-$r-$s.json > $OUT/fsdp-small-$r-$s.log 2>&1
    echo "=== fsdp small reduce=$r $s rc=$?"; grep -E "^(hoccl|nccl) " $OUT/fsdp-small-$r-$s.log | tail -2
  done
  bash scripts/tcp-nodes.sh "${m[@]}" examples/train_pipeline.py --size small --steps 20 --repeats 3 --comm hoccl,nccl \
    --json $OUT/pipe-small-$s.json > $OUT/pipe-small-$s.log 2>&1
  echo "=== pipeline small $s rc=$?"; grep -E "^(hoccl|nccl) " $OUT/pipe-small-$s.log | tail -2
done
cd "$OUT" && tar czf logs.tgz *.log *.json && rm -f *.log *.json
