#!/usr/bin/env bash
# Session 55, run 1. Session 54's FSDP small under MPS was bimodal on H100 hosts: a HOCCL round ran either ~40 ms a
# step (forward 12.6 ms, slack ~0, NCCL's pace) or ~50 ms (forward 17-18 ms, slack +3 ms: the GPU behind), and
# invocations differed in which mode their rounds took. (a) One traced invocation (HOCCL_NET_TRACE and a sampler of
# every thread's CPU, threads.py) of hoccl and nccl, 6 rounds of 20 steps, to see which step of a call grows in the
# slow rounds. (b) Longer rounds (5 of 60 steps) with torchtitan's collector setting (--gc-every 50), FSDP small and
# pipeline small in both settings, hoccl / nccl / none: the rounds' spread with rounds 3x as long. Two TCP nodes of one
# rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nproc; lscpu | grep -E "Model name|NUMA node|L3" | head -5
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
D=$PWD/docs/results/2026-12-06-s55
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-560}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
python3 $D/threads.py $OUT/threads.csv 0.05 120 & SAMPLER=$!
TCP_NODES_TIMEOUT=90 timeout 100 env HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
  --size small --batch 4 --reduce nccl --comm hoccl,nccl --steps 20 --repeats 6 --json $OUT/traced.json \
  > $OUT/traced.log 2>&1
echo "=== traced fsdp small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/traced.log
kill $SAMPLER; wait $SAMPLER 2>/dev/null
python3 -m hoccl_runtime.net.trace $OUT/trace 2>&1 | head -40
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 130 && { TCP_NODES_TIMEOUT=120 timeout 130 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm hoccl,nccl,none --steps 60 --repeats 5 --gc-every 50 --json $OUT/fsdp-$m.json \
    > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; grep "collector" $OUT/fsdp-$m.log; }
  fits 100 && { TCP_NODES_TIMEOUT=90 timeout 100 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm hoccl,nccl --steps 60 --repeats 5 --gc-every 50 --json $OUT/pipeline-$m.json \
    > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; grep "collector" $OUT/pipeline-$m.log; }
done
cd $OUT && tar czf logs-run1.tgz *.log *.json trace* threads.csv 2>/dev/null; rm -rf *.log *.json trace* threads.csv cache
echo "=== total $(( $(date +%s) - T0 )) s"
