#!/usr/bin/env bash
# Session 53, run 4: where a HOCCL AllGather call's host time goes inside FSDP small's step under MPS (hosttime2.py:
# the communicator's own steps timed, HOCCL against NCCL in one invocation), and whether the bound on unfinished calls
# (HOCCL_NET_AHEAD, default 2) holds the training thread: FSDP small under MPS with it off (0) and at 8, against
# NCCL, untimed, 3 rounds (cut to fit the session's device time left). Last, whether the hoccl group's NCCL reducer still warns at exit that
# destroy_process_group() was not called (ProcessGroupHoccl.shutdown now shuts it down). Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
D=docs/results/2026-12-06-s53
T0=$(date +%s)
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$OUT/$1" | tail -n "${2:-8}"; }
HOSTTIME_OUT=$OUT/hosttime TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps $D/hosttime2.py \
  examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl,nccl --steps 20 --repeats 3 \
  --json $OUT/timed.json > $OUT/timed.log 2>&1
echo "=== fsdp small mps timed rc=$?"; table timed.log; cat $OUT/hosttime.rank0.txt
if [ "${AHEAD:-1}" = 1 ]; then  # AHEAD=0: the timed run alone
TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --reduce nccl --comm hoccl,hoccl+HOCCL_NET_AHEAD=0,hoccl+HOCCL_NET_AHEAD=8,nccl --steps 20 --repeats 3 \
  --json $OUT/fsdp-ahead.json > $OUT/fsdp-ahead.log 2>&1
echo "=== fsdp small mps ahead rc=$?"; table fsdp-ahead.log
fi
echo "=== 'destroy_process_group() was not called' warnings per log (the hoccl group now shuts its NCCL reducer down):"
grep -c "destroy_process_group() was not called" $OUT/*.log
cd $OUT && tar czf logs-run4.tgz *.log *.json *.txt 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
