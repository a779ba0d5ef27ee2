#!/usr/bin/env bash
# Session 33, run 5 on the 1x H200: the call path trimmed (run 1's whole-batch path; cuda_errors a class, imports once,
# one error check a call). "tests": the torch and training-over-TCP GPU tests. "measure": pipeline small's per-layer
# host time (--layers) under MPS and time-sliced, then the issue's --compare at small in both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case ${1:?tests or measure} in
tests)
  timeout 420 python3 -m pytest -q -x tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py > $OUT/gputests.log 2>&1
  echo "=== gpu tests rc=$?"; tail -3 $OUT/gputests.log ;;
measure)
  export TCP_NODES_TIMEOUT=150
  for mode in mps sliced; do
    flag=""; [ $mode = mps ] && flag="--mps"
    bash scripts/tcp-nodes.sh $flag examples/profile_pipeline.py --size small --steps 20 --repeats 2 --comm hoccl,nccl \
      --no-p2p --layers > $OUT/pipe-$mode.log 2>&1
    echo "=== pipeline small layers $mode rc=$?"
    grep -E '^(comm|hoccl|nccl|step layer .*(batch_isend|_call|submit|prepare|follow|end))' $OUT/pipe-$mode.log
  done
  for mode in mps sliced; do
    flag=""; [ $mode = mps ] && flag="--mps"
    TCP_NODES_TIMEOUT=120 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode small > $OUT/compare-$mode.txt 2>&1
    echo "=== compare $mode rc=$?"; cat $OUT/compare-$mode.txt
  done ;;
esac
cd $OUT && tar czf logs-$1.tgz $(ls -d *.log mps sliced 2>/dev/null) && rm -rf *.log mps sliced
