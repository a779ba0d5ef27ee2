#!/usr/bin/env bash
# Session 34, run 7 on the 2x H200 (lent for the first time in days): the issue's --compare at small with each TCP
# "node" on a GPU of its own (scripts/tcp-nodes.sh puts node n on GPU n mod the GPU count), so neither library's
# work shares a GPU with the other rank's: HOCCL's TCP network communicator against NCCL's socket transport between
# two GPUs of one host (NCCL_P2P_DISABLE and NCCL_SHM_DISABLE as on one GPU). 2 MiB network chunks.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
TCP_NODES_TIMEOUT=100 bash scripts/tcp-nodes.sh --compare $OUT/two-gpus small > $OUT/compare-two-gpus.txt 2>&1
echo "=== compare two GPUs rc=$?"; cat $OUT/compare-two-gpus.txt
cd $OUT && tar czf logs-run7.tgz two-gpus && rm -rf two-gpus
