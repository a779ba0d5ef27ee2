#!/usr/bin/env bash
# Session 22, run 4 on the 1x H200: pipeline small's send/recv traced step by step (HOCCL_NET_TRACE, with when the
# last write was posted and the last chunk came in), as it is and with 1 MiB writes sent from the driving thread
# (HOCCL_TCP_DIRECT_BYTES=4194304) in 256 KiB chunks (HOCCL_NET_CHUNK_BYTES=262144), both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-90}
P=examples/train_pipeline.py
for setting in sliced mps; do
  flag=$([ "$setting" = mps ] && echo --mps)
  for variant in default direct-chunk256k; do
    name=pipe-small-$setting-$variant
    env=(); [ "$variant" != default ] && env=(HOCCL_TCP_DIRECT_BYTES=4194304 HOCCL_NET_CHUNK_BYTES=262144)
    env "${env[@]}" HOCCL_NET_TRACE="$OUT/trace-$setting-$variant" bash scripts/tcp-nodes.sh $flag $P --size small \
      --steps 10 --repeats 1 --comm hoccl --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
    echo "=== $name rc=$?"; grep -E "^hoccl " "$OUT/$name.log" | tail -n 1
  done
done
