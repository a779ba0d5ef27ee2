#!/usr/bin/env bash
# Session 47, run 4 (run 3's H100, warm; one inline command of the device tool): on that host, the new default (native
# engine) against the Python lanes in one invocation, FSDP small (NCCL reducing) and 1F1B pipeline small under MPS,
# 5 interleaved rounds, CPUs pinned.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
C="hoccl,hoccl+HOCCL_TCP_ENGINE=thread,nccl"
for s in fsdp pipeline; do
  t0=$(date +%s); a="--batch 4 --reduce nccl"; [ $s = pipeline ] && a="--batch 8"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh --mps examples/train_$s.py --size small $a --steps 20 \
    --repeats 5 --comm $C --json $OUT/$s-small-mps-ab.json > $OUT/$s-small-mps-ab.log 2>&1
  echo "=== $s small mps A/B rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/$s-small-mps-ab.log | tail -n 4
done
cd $OUT && tar czf logs-run4.tgz *.log *.json && rm -f *.log *.json
