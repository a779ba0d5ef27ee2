#!/usr/bin/env bash
# Session 47, run 6: settings on the native engine, one invocation per example, under MPS (FSDP small NCCL-reducing and
# 1F1B pipeline small, 5 interleaved rounds, CPUs pinned): the default (HOCCL_NET_WAKE=1: the proxy's pause ends at the
# engine's next event), the pause as a sleep (HOCCL_NET_WAKE=0), parts of 256 KiB over the lanes (HOCCL_TCP_MIN_PART),
# network chunks of 1 MiB (HOCCL_NET_CHUNK_BYTES), and NCCL.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
F="hoccl,hoccl+HOCCL_NET_WAKE=0,hoccl+HOCCL_TCP_MIN_PART=262144,hoccl+HOCCL_NET_CHUNK_BYTES=1048576,nccl"
P="hoccl,hoccl+HOCCL_NET_WAKE=0,nccl"
for s in fsdp pipeline; do
  t0=$(date +%s); a="--batch 4 --reduce nccl --comm $F"; [ $s = pipeline ] && a="--batch 8 --comm $P"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps examples/train_$s.py --size small $a --steps 20 \
    --repeats 5 --json $OUT/$s-small-mps.json > $OUT/$s-small-mps.log 2>&1
  echo "=== $s small mps rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/$s-small-mps.log | tail -n 6
done
cd $OUT && tar czf logs-run6.tgz *.log *.json && rm -f *.log *.json
