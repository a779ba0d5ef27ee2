#!/usr/bin/env bash
# Session 31, run 9 on the 1x H200: the one-node broadcast as a scatter and an in-place AllGather (4 ranks on GPU 0,
# the torch worker's 8 MiB broadcasts from every root), and the multicast GPU tests on the new broadcast plans
# (the ring in further nodes, the chunk order by readiness).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 280 python3 -m pytest -q -x tests/gpu/test_gpu_torch.py -k "four" tests/gpu/test_gpu_multicast.py \
  > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$?"; tail -4 $OUT/gputests.log
# (run as given, -k "four" also deselected tests/gpu/test_gpu_multicast.py: 7 passed, the four-rank torch checks;
# the multicast file was then run alone: `timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_multicast.py`,
# 8 passed in 6.00 s)
