#!/usr/bin/env bash
# Session 32, run 1 on the 1x H200: where a message's time goes below the executor. (a) TcpTransport ping-pong between
# two processes, the waiting side sleeping between looks (today) or woken by a doorbell (HOCCL_NET_BELL), 1 and 8 lanes,
# beside Python's TCP floor; (b) a gated copy on the GPU alone (gate open -> copy -> done flag seen); (c) point-to-point
# through the hoccl group and NCCL over TCP nodes under MPS, HOCCL without and with the doorbell, traced (oneway.py);
# (d) pipeline small under MPS, HOCCL with the doorbell beside NCCL.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
D=docs/results/2026-12-04-s32
for l in 8 1; do for w in sleep bell; do WAIT=$w LANES=$l python3 $D/tping.py; done; done
python3 docs/results/2026-12-04-s31/tcpfloor.py
python3 $D/gatelat.py
for bell in 0 1; do
  HOCCL_NET_BELL=$bell HOCCL_NET_TRACE=$OUT/p2p-bell$bell bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py \
    --comm hoccl,nccl --no-pipeline --calls 32 > $OUT/p2p-bell$bell.log 2>&1
  echo "=== p2p mps bell=$bell rc=$?"; grep -E '^(group|hoccl|nccl) ' $OUT/p2p-bell$bell.log
  python3 docs/results/2026-12-04-s31/oneway.py $OUT/p2p-bell$bell
done
HOCCL_NET_BELL=1 bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
  --repeats 2 --comm hoccl,nccl --no-p2p > $OUT/pipe-mps-bell1.log 2>&1
echo "=== pipeline mps bell=1 rc=$?"; grep -E '^(comm|hoccl|nccl|losses)' $OUT/pipe-mps-bell1.log
cd $OUT && tar czf logs.tgz *.log *.csv 2>/dev/null; rm -f *.csv *.log
