#!/usr/bin/env bash
# Session 30, run 2 on the 1x H200: (1) cProfile of HOCCL's 1 MiB point-to-point calls through the hoccl group
# (where the training thread's ~330 us a call go); (2) run 1 again on the early runs (a call set up before its
# stream reaches it), both settings, traced; (3) the point-to-point part with 256 KiB lane parts.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=200
bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline --cprofile $OUT/prof \
  > $OUT/prof.log 2>&1
echo "=== cprofile rc=$?"
HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh examples/profile_pipeline.py --size small --steps 20 \
  --repeats 3 > $OUT/sliced.log 2>&1
echo "=== sliced rc=$?"; grep -v '^\[' $OUT/sliced.log | grep -E '^(group|hoccl|nccl|none|comm|losses)'
bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 --repeats 3 > $OUT/mps.log 2>&1
echo "=== mps rc=$?"; grep -v '^\[' $OUT/mps.log | grep -E '^(group|hoccl|nccl|none|comm|losses)'
HOCCL_TCP_MIN_PART=262144 bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline \
  > $OUT/part256k.log 2>&1
echo "=== part 256k sliced rc=$?"; grep -E '^(group|hoccl)' $OUT/part256k.log
head -45 $OUT/prof.rank0.txt
