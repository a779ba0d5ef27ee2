#!/usr/bin/env bash
# Session 27, run 5 on the 1x H200: run 4 again, the staging copies let go before the plan notice is written; steps of
# their own (HOCCL_NET_TRACE), both settings, to see what a send waits for before its first write.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=120
for s in sliced mps; do
  m=(); [ $s = mps ] && m=(--mps)
  HOCCL_NET_TRACE=$OUT/trace-$s bash scripts/tcp-nodes.sh "${m[@]}" examples/train_pipeline.py --size small \
    --steps 10 --repeats 1 --comm hoccl --json $OUT/pipe-small-trace-$s.json > $OUT/pipe-small-trace-$s.log 2>&1
  echo "=== traced $s rc=$?"; grep -E "^hoccl " $OUT/pipe-small-trace-$s.log | tail -1
done
cd "$OUT" && tar czf logs.tgz *.log *.json && rm -f *.log *.json
