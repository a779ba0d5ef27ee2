#!/usr/bin/env bash
# Session 55, run 3: FSDP small under MPS, hoccl and nccl, 3 rounds of 20 steps, with each AllGather timed on the GPU
# by CUDA events around FSDP's call on its all-gather stream (evtime.py), and HOCCL's proxy traced (HOCCL_NET_TRACE),
# to tell whether a HOCCL AllGather's late landings (run 1's trace: last chunk in -> landing seen, p50 ~300 us, p90
# ~1.1 ms) are GPU time. Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=$PWD/docs/results/2026-12-06-s55
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
EVTIME_OUT=$OUT/ev HOCCL_NET_TRACE=$OUT/trace TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh --mps \
  $D/evtime.py examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl,nccl --steps 20 --repeats 3 \
  --json $OUT/evtime.json > $OUT/evtime.log 2>&1
echo "=== rc=$?"; grep -E "^(comm|hoccl|nccl)[ +]" $OUT/evtime.log; cat $OUT/ev.rank0.txt $OUT/ev.rank1.txt
python3 -m hoccl_runtime.net.trace $OUT/trace 2>&1 | head -12
cd $OUT && tar czf logs-run3.tgz *.log *.json trace* ev.* 2>/dev/null; rm -rf *.log *.json trace* cache
