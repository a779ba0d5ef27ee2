#!/usr/bin/env bash
# Session 48, run 2 (not run: no device was lent in session 48; for the next session, after run 1): 350m, FSDP reduced
# by NCCL and by HOCCL (its own group) and the 1F1B pipeline, the default against both gates of run 1 on, as a
# variant of the same invocation, NCCL and the no-communication limit; 3 interleaved rounds of
# 8 steps, both settings, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
C="hoccl,hoccl+HOCCL_NET_LAND_GATES=1+HOCCL_NET_SEND_GATES=1,nccl"
for m in mps sliced; do
  f=""; [ $m = mps ] && f="--mps"
  for r in nccl hoccl; do
    t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=240 timeout 300 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size 350m \
      --batch 2 --steps 8 --repeats 3 --reduce $r --comm $C$([ $r = nccl ] && echo ,none) \
      --json $OUT/fsdp-350m-$r-$m.json > $OUT/fsdp-350m-$r-$m.log 2>&1
    echo "=== fsdp 350m reduce=$r $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-350m-$r-$m.log | tail -n 5
  done
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=240 timeout 300 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size 350m \
    --batch 8 --steps 8 --repeats 3 --comm $C,none --json $OUT/pipeline-350m-$m.json > $OUT/pipeline-350m-$m.log 2>&1
  echo "=== pipeline 350m $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipeline-350m-$m.log | tail -n 5
done
cd $OUT && tar czf logs-run2.tgz *.log *.json && rm -rf *.log *.json cache
