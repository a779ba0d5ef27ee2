#!/usr/bin/env bash
# train_fsdp.py with each GPU its own "node" over TCP (HOCCL: the network communicator; NCCL: its socket
# transport), two torchrun nodes on this host; on a 1-GPU machine both nodes share GPU 0 (pass --share-gpu and
# --comm hoccl: NCCL refuses two ranks on one GPU). Arguments go to train_fsdp.py; --json is per node-0 rank.
#   bash scripts/fsdp-tcp.sh --size 1.3b --batch 2 --steps 50 --repeats 3 --comm hoccl,nccl --json OUT.json
set -u
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || { echo "fsdp-tcp: no GPU found (nvidia-smi -L)"; exit 2; }
port=${MASTER_PORT:-29533}
pids=()
for n in 0 1; do
  CUDA_VISIBLE_DEVICES=$((n % gpus)) torchrun --nnodes 2 --node-rank "$n" --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port "$port" examples/train_fsdp.py "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
