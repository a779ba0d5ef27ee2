#!/usr/bin/env bash
# Session 52, run 2: where the training thread's time goes in FSDP small under MPS (sample.py: its Python stack
# sampled every 200 us), HOCCL (traced) and NCCL (VARIANTS) each in an invocation of its own, 3 rounds of 20
# steps; two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/tr"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=100
D=docs/results/2026-12-06-s52
for v in ${VARIANTS:-hoccl nccl}; do
  t0=$(date +%s)
  HOCCL_NET_TRACE=$OUT/tr/$v SAMPLE_OUT=$OUT/sample-$v timeout 110 bash scripts/tcp-nodes.sh --mps $D/sample.py \
    examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm $v --steps 20 --repeats 3 \
    --json $OUT/fsdp-$v.json > $OUT/fsdp-$v.log 2>&1
  echo "=== fsdp small mps $v rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-$v.log
  for r in 0 1; do echo "--- sample $v rank $r"; head -n 45 $OUT/sample-$v.rank$r.txt; done
done
python3 $D/gaps.py $OUT/tr/hoccl 2>&1 | tail -n 32
cd $OUT && tar czf logs-run2.tgz *.log *.json *.txt tr 2>/dev/null; rm -rf *.log *.json tr cache
