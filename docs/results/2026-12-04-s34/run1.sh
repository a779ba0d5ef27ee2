#!/usr/bin/env bash
# Session 34, run 1 on the 1x H200. "tests": the torch and training-over-TCP GPU tests (session 33's last torch
# change, a whole batch taking the deferred ops with it, and the compiler's new Broadcast orders ran on the CPU only).
# "diag": where FSDP small loses under MPS: AllGather alone and beside an NCCL reduce-scatter, hoccl group against
# NCCL (agbench.py), in both settings; then FSDP small under MPS (NCCL reducing) with the proxy's per-call trace.
# (run 1 ran agbench.py's first form: one hoccl group, the stream idle, so the call's host time was timed, rank 0's time;
# its rows "alone" and "beside RS" are that. The file now is run 3's form.)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
d=docs/results/2026-12-04-s34
case ${1:?tests or diag} in
tests)
  timeout 480 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
  echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log ;;
diag)
  export TCP_NODES_TIMEOUT=150
  for mode in mps sliced; do
    flag=""; [ $mode = mps ] && flag="--mps"
    bash scripts/tcp-nodes.sh $flag $d/agbench.py --sizes 1,3,8 --repeats 15 > $OUT/ag-$mode.log 2>&1
    echo "=== agbench $mode rc=$?"; grep -A12 "^AllGather over" $OUT/ag-$mode.log
  done
  HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 --steps 20 \
    --repeats 3 --comm hoccl,nccl,none --reduce nccl --json $OUT/fsdp.json > $OUT/fsdp-mps.log 2>&1
  echo "=== fsdp small mps traced rc=$?"; grep -E "^(comm|hoccl|nccl|none) " $OUT/fsdp-mps.log
  python3 $d/trace_summary.py $OUT/trace | head -40 ;;
esac
cd $OUT && tar czf logs-$1.tgz $(ls *.log *.csv *.json 2>/dev/null) && rm -f *.log *.csv *.json
