#!/usr/bin/env bash
# Session 54, run 3: the native kept call (HOCCL_NET_NATIVE_CALL=auto, the new default: a call from a kept launch
# list moves its counts, tells the proxy process and makes its driver calls in one C call). First the GPU tests of
# the network paths and of the torch backend; then the host time of FSDP small's AllGather calls inside the step under
# MPS with it and without (hosttime3.py, two invocations of HOCCL against NCCL, 3 rounds of 20 steps); then A/B
# against NCCL in one invocation each: FSDP small and pipeline small, MPS and time-sliced, 5 rounds of 20 steps,
# variants hoccl (native), hoccl+HOCCL_NET_NATIVE_CALL=off (the Python path), nccl. Two TCP nodes of one rank
# sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
D=$PWD/docs/results/2026-12-06-s54
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
timeout 150 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_torch.py \
  tests/gpu/test_gpu_internode.py > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - T0 )) s"; tail -5 $OUT/gputests.log
for v in native off; do
  HOCCL_NET_NATIVE_CALL=$([ $v = native ] && echo auto || echo off) HOSTTIME_OUT=$OUT/step-$v TCP_NODES_TIMEOUT=70 \
    timeout 80 bash scripts/tcp-nodes.sh --mps $D/hosttime3.py examples/train_fsdp.py --size small --batch 4 \
    --reduce nccl --comm hoccl,nccl --steps 20 --repeats 3 --json $OUT/step-$v.json > $OUT/step-$v.log 2>&1
  echo "=== hosttime fsdp small mps $v rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/step-$v.log
  grep -E "all_gather_into_tensor|NativeCalls|kept_list|prepare|submit|launch_deferred|__call__" $OUT/step-$v.rank0.txt
done
V=hoccl,hoccl+HOCCL_NET_NATIVE_CALL=off,nccl
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 110 && { TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $V --steps 20 --repeats 5 --json $OUT/fsdp-$m.json > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; }
  fits 70 && { TCP_NODES_TIMEOUT=60 timeout 70 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm $V --steps 20 --repeats 5 --json $OUT/pipeline-$m.json > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; }
done
grep -h "Python path\|NATIVE_CALL" $OUT/*.log | sort | uniq -c | head -5
cd $OUT && tar czf logs-run3.tgz *.log *.json *.txt 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
