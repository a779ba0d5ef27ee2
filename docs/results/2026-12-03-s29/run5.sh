#!/usr/bin/env bash
# Session 29, run 5 on the 1x H200: the network chunk size (HOCCL_NET_CHUNK_BYTES: 8 MiB, the default; 2 MiB; 1 MiB)
# for FSDP small (its AllGathers of 2-8 MB: one chunk per peer at 8 MiB, so staging, TCP and landing do not
# overlap), NCCL reducing, HOCCL / NCCL / none, 3 interleaved rounds, MPS then time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for s in mps sliced; do
  m=(); [ $s = mps ] && m=(--mps)
  for c in 8388608 2097152 1048576; do
    HOCCL_NET_CHUNK_BYTES=$c bash scripts/tcp-nodes.sh "${m[@]}" examples/train_fsdp.py --size small --batch 4 \
      --steps 20 --repeats 3 --comm hoccl,nccl,none --reduce nccl --json $OUT/fsdp-small-$s-chunk$c.json \
      > $OUT/fsdp-small-$s-chunk$c.log 2>&1
    echo "=== fsdp small $s chunk $c rc=$?"; grep -E "^(hoccl|nccl|none) " $OUT/fsdp-small-$s-chunk$c.log | tail -3
  done
done
cd "$OUT" && tar czf logs.tgz *.log *.json; rm -f *.log *.json
