#!/usr/bin/env bash
# Session 47, run 2 (the same H100 as run 1, warm): 350m, FSDP (NCCL reducing) and 1F1B pipeline, HOCCL on the Python
# lanes against HOCCL on the native engine and NCCL, 3 interleaved rounds of 8 steps, both settings, CPUs pinned.
# (Ran as one inline command of the device tool; this is that command.)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export HOCCL_CACHE_DIR=$OUT/cache; C="hoccl,hoccl+HOCCL_TCP_ENGINE=native,nccl"
for m in mps sliced; do
  f=""; [ $m = mps ] && f="--mps"
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=240 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size 350m --batch 2 --steps 8 \
    --repeats 3 --reduce nccl --comm $C --json $OUT/fsdp-350m-$m.json > $OUT/fsdp-350m-$m.log 2>&1
  echo "=== fsdp 350m $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-350m-$m.log | tail -n 4
  t0=$(date +%s)
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=240 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size 350m --batch 8 \
    --steps 8 --repeats 3 --comm $C --json $OUT/pipeline-350m-$m.json > $OUT/pipeline-350m-$m.log 2>&1
  echo "=== pipeline 350m $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipeline-350m-$m.log | tail -n 4
done
cd $OUT && tar czf logs-run2.tgz *.log *.json && rm -rf *.log *.json cache
