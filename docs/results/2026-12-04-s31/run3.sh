#!/usr/bin/env bash
# Session 31, run 3 on the 1x H200: the TCP floor from Python (tcpfloor.py: 1 MiB one way 181-265 us, 64 KiB 27-46)
# against HOCCL's posted->in (1 MiB 483-528 us, 64 KiB 157-167 in run 1): point-to-point one-way under MPS with one
# lane, two lanes, and 8 lanes with fixed 8 MiB socket buffers (no autotuning ramp on lanes that rarely carry).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
D=docs/results/2026-12-04-s31
for v in "HOCCL_NET_LANES=1" "HOCCL_NET_LANES=2" "HOCCL_TCP_SOCKET_BUFFER=8388608"; do
  name=${v//=/-}
  env $v HOCCL_NET_TRACE=$OUT/p2p-$name bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --comm hoccl \
    --no-pipeline --calls 32 > $OUT/p2p-$name.log 2>&1
  echo "=== p2p mps $v rc=$?"; grep -E '^(group|hoccl|nccl) ' $OUT/p2p-$name.log
  python3 $D/oneway.py $OUT/p2p-$name
done
cd $OUT && tar czf logs.tgz *.log *.csv 2>/dev/null; rm -f *.csv
