#!/usr/bin/env bash
# Session 24, run 3 on the 1x H200: the network chunk size (HOCCL_NET_CHUNK_BYTES) in FSDP 350m with HOCCL
# reducing, both settings. Run 2's trace: a 25 MB AllGather (12.6 MB each way) took 2.8 ms from its start to its
# last byte (4.7 GB/s a direction), its chunks 8 MiB, so two chunks and little overlap of staging, TCP and landing.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-150}
for setting in sliced mps; do
  mps=(); [ $setting = mps ] && mps=(--mps)
  for chunk in 8388608 2097152 1048576 4194304; do
    name=fsdp-350m-hr-$setting-c$((chunk >> 10))k; t0=$SECONDS
    HOCCL_NET_CHUNK_BYTES=$chunk bash scripts/tcp-nodes.sh "${mps[@]}" examples/train_fsdp.py --size 350m --batch 2 \
      --steps 8 --repeats 2 --comm hoccl,nccl --reduce hoccl --timeout 100 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
    echo "=== $name rc=$? $((SECONDS - t0)) s"; grep -E "^(hoccl|nccl) " "$OUT/$name.log" | tail -n 2
  done
done
