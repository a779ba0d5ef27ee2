#!/usr/bin/env bash
# Session 29, run 3 on the 1x H200: what a 1 MiB send's TCP write costs with the transport's knobs. bench_tcp 1 and
# 4 MiB one way, 8 lanes: the default, a fixed 8 MiB socket buffer (HOCCL_TCP_SOCKET_BUFFER), writes up to 2 MiB sent
# from the caller's thread (HOCCL_TCP_DIRECT_BYTES: no hand-off to the lane's thread), both; then pipeline small
# (1F1B, 2 stages) HOCCL / NCCL / none time-sliced, 3 interleaved rounds, with each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
declare -A E=([default]="" [buf8m]="HOCCL_TCP_SOCKET_BUFFER=8388608" [direct2m]="HOCCL_TCP_DIRECT_BYTES=2097152"
              [both]="HOCCL_TCP_SOCKET_BUFFER=8388608 HOCCL_TCP_DIRECT_BYTES=2097152")
for v in default buf8m direct2m both; do
  echo "=== bench_tcp $v"
  env ${E[$v]} timeout 120 python examples/bench_tcp.py --sizes 1MiB,4MiB --lanes 8 2>&1 | tail -2
done
for v in default buf8m direct2m both; do
  env ${E[$v]} bash scripts/tcp-nodes.sh examples/train_pipeline.py --size small --steps 20 --repeats 3 \
    --comm hoccl,nccl,none --json $OUT/pipe-small-$v.json > $OUT/pipe-small-$v.log 2>&1
  echo "=== pipeline small sliced $v rc=$?"; grep -E "^(hoccl|nccl|none) " $OUT/pipe-small-$v.log | tail -3
done
cd "$OUT" && tar czf logs.tgz *.log *.json; rm -f *.log *.json
