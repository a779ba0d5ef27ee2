#!/usr/bin/env bash
# Session 55, run 4. (a) The host's TCP buffer limits. (b) Small, under MPS, 5 rounds of 30 steps, --gc-every 50:
# hoccl; hoccl with the send gates (HOCCL_NET_SEND_GATES=1: a chunk's write leaves when the engine's watcher sees its
# staging copy done, not the proxy's loop); hoccl with fixed 4 MiB socket buffers (HOCCL_TCP_SOCKET_BUFFER, never
# measured before: the kernel caps it at net.core.[rw]mem_max, doubled); nccl. FSDP small (NCCL reducing) and
# pipeline small. (c) 1.3b with --deterministic under MPS, hoccl and nccl: the losses (exactly equal for FSDP with one
# reducer). (d) The GPU tests of training over TCP nodes on this main. Two TCP nodes of one rank sharing the GPU, CPUs
# pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
sysctl net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem 2>&1
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-570}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
V=hoccl,hoccl+HOCCL_NET_SEND_GATES=1,hoccl+HOCCL_TCP_SOCKET_BUFFER=4194304,nccl
TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --reduce nccl --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-mps.log
TCP_NODES_TIMEOUT=90 timeout 100 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/pipeline-mps.json > $OUT/pipeline-mps.log 2>&1
echo "=== pipeline small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-mps.log
S="--size 1.3b --steps 3 --warmup 1 --repeats 2 --deterministic"
fits 100 && { TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py $S --batch 2 \
  --reduce nccl --comm hoccl,nccl --json $OUT/fsdp-1.3b-det.json > $OUT/fsdp-1.3b-det.log 2>&1
  echo "=== fsdp 1.3b mps deterministic rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-1.3b-det.log; }
fits 130 && { TCP_NODES_TIMEOUT=120 timeout 130 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py $S \
  --batch 8 --comm hoccl,nccl --json $OUT/pipe-1.3b-det.json > $OUT/pipe-1.3b-det.log 2>&1
  echo "=== pipeline 1.3b mps deterministic rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipe-1.3b-det.log; }
left=$(( END - $(date +%s) - 10 ))
[ $left -ge 60 ] && { timeout $left python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py \
  > $OUT/gputests.log 2>&1; echo "=== gpu tests rc=$? $(( $(date +%s) - T0 )) s"; tail -3 $OUT/gputests.log; }
cd $OUT && tar czf logs-run4.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
