#!/usr/bin/env bash
# Session 24, run 4 on the 1x H200: the 1.3b comparison under MPS (the row session 23 had no device time left for),
# then the two-rank torch checks again (run 1 failed one: a check still expected reduce='nccl' refused where ranks
# share a GPU, which NCCL now answers for itself).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
COMPARE_STEPS=4 TCP_NODES_TIMEOUT=300 bash scripts/tcp-nodes.sh --mps --compare "$OUT/compare-mps-1.3b" 1.3b \
  > "$OUT/compare-1.3b-mps.txt" 2>&1
echo "=== compare 1.3b mps rc=$? $((SECONDS - t0)) s"; tail -n 25 "$OUT/compare-1.3b-mps.txt"
t0=$SECONDS
timeout -k 10 200 python -m pytest -q -rfE -p no:cacheprovider "tests/gpu/test_gpu_torch.py" -k two_ranks \
  > "$OUT/gpu-torch-two-ranks.log" 2>&1
echo "=== two-rank torch checks rc=$? $((SECONDS - t0)) s"; tail -n 4 "$OUT/gpu-torch-two-ranks.log"
