#!/usr/bin/env bash
# A training example with each GPU its own "node" over TCP (HOCCL: the network communicator; NCCL: its socket
# transport), two torchrun nodes of one rank on this host; on a 1-GPU machine both nodes share GPU 0 (pass
# --share-gpu and --comm hoccl: NCCL refuses two ranks on one GPU). The first argument is the script, the rest go
# to it; --json is written by the rank that writes it in the script (node 1's for train_pipeline.py).
#   bash scripts/tcp-nodes.sh examples/train_fsdp.py --size 1.3b --batch 2 --steps 50 --repeats 3 --comm hoccl,nccl
#   bash scripts/tcp-nodes.sh examples/train_pipeline.py --size small --steps 50 --repeats 3 --comm hoccl,nccl
set -u
script=${1:?usage: tcp-nodes.sh SCRIPT [ARGS...]}
shift
[ -f "$script" ] || { echo "tcp-nodes: no such script: $script"; exit 2; }
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || { echo "tcp-nodes: no GPU found (nvidia-smi -L)"; exit 2; }
port=${MASTER_PORT:-29533}
pids=()
for n in 0 1; do
  CUDA_VISIBLE_DEVICES=$((n % gpus)) torchrun --nnodes 2 --node-rank "$n" --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port "$port" "$script" "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
