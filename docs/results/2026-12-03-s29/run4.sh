#!/usr/bin/env bash
# Session 29, run 4 on the 1x H200: how far the training thread may run ahead of the network proxy
# (HOCCL_NET_AHEAD: 2, the default; 8; 0, no bound). Pipeline small (HOCCL / NCCL / none) and FSDP small (NCCL
# reducing; HOCCL / NCCL / none), 3 interleaved rounds, both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for s in sliced mps; do
  m=(); [ $s = mps ] && m=(--mps)
  for a in 2 8 0; do
    HOCCL_NET_AHEAD=$a bash scripts/tcp-nodes.sh "${m[@]}" examples/train_pipeline.py --size small --steps 20 \
      --repeats 3 --comm hoccl,nccl,none --json $OUT/pipe-small-$s-ahead$a.json > $OUT/pipe-small-$s-ahead$a.log 2>&1
    echo "=== pipeline small $s ahead $a rc=$?"; grep -E "^(hoccl|nccl|none) " $OUT/pipe-small-$s-ahead$a.log | tail -3
  done
  for a in 2 8; do
    HOCCL_NET_AHEAD=$a bash scripts/tcp-nodes.sh "${m[@]}" examples/train_fsdp.py --size small --batch 4 --steps 20 \
      --repeats 3 --comm hoccl,nccl,none --reduce nccl --json $OUT/fsdp-small-$s-ahead$a.json \
      > $OUT/fsdp-small-$s-ahead$a.log 2>&1
    echo "=== fsdp small $s ahead $a rc=$?"; grep -E "^(comm|hoccl|nccl|none) " $OUT/fsdp-small-$s-ahead$a.log | tail -4
  done
done
cd "$OUT" && tar czf logs.tgz *.log *.json; rm -f *.log *.json
