#!/usr/bin/env bash
# Session 25, run 1 on the 1x H200: is the TCP rate with both directions busy (~5.5 GB/s a direction per call in
# session 24's trace) the transport's or the host's? examples/bench_tcp.py one way and --both (raw sockets beside,
# same lanes), then FSDP 350m with HOCCL reducing over the TCP nodes with HOCCL_NET_LANES 8 / 16 / 4, both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
python examples/bench_tcp.py --sizes 2MiB,12MiB,64MiB --lanes 4,8,16 > "$OUT/tcp-one-way.txt" 2>&1
echo "=== tcp one way rc=$? $((SECONDS - t0)) s"; cat "$OUT/tcp-one-way.txt"
t0=$SECONDS
python examples/bench_tcp.py --both --sizes 2MiB,12MiB,64MiB --lanes 4,8,16 > "$OUT/tcp-both.txt" 2>&1
echo "=== tcp both rc=$? $((SECONDS - t0)) s"; cat "$OUT/tcp-both.txt"
export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-150}
for setting in mps sliced; do
  mps=(); [ $setting = mps ] && mps=(--mps)
  for lanes in 8 16 4; do
    name=fsdp-350m-hr-$setting-l$lanes; t0=$SECONDS
    HOCCL_NET_LANES=$lanes bash scripts/tcp-nodes.sh "${mps[@]}" examples/train_fsdp.py --size 350m --batch 2 \
      --steps 8 --repeats 2 --comm hoccl,nccl --reduce hoccl --timeout 100 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
    echo "=== $name rc=$? $((SECONDS - t0)) s"; grep -E "^(hoccl|nccl) " "$OUT/$name.log" | tail -n 2
  done
done
cd "$OUT" && tar czf fsdp-logs.tgz fsdp-*.log fsdp-*.json && rm -f fsdp-*.log fsdp-*.json
