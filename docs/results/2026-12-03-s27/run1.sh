#!/usr/bin/env bash
# Session 27, run 1 on the 1x H200: pipeline small (1F1B, 2 stages, 1 MiB activations), HOCCL against NCCL in the
# same run, 3 interleaved rounds, both settings, with a 1 MiB write cut across TCP lanes (HOCCL_TCP_MIN_PART) and
# with smaller network chunks (HOCCL_NET_CHUNK_BYTES, so the staging copies overlap the writes); then the default
# traced (HOCCL_NET_TRACE) to see where a send's time goes since the eager runs.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=120
P=examples/train_pipeline.py
for s in sliced mps; do
  m=(); [ $s = mps ] && m=(--mps)
  for v in default part256k part256k-chunk256k part128k; do
    env=()
    case $v in
      part256k) env=(HOCCL_TCP_MIN_PART=262144) ;;
      part256k-chunk256k) env=(HOCCL_TCP_MIN_PART=262144 HOCCL_NET_CHUNK_BYTES=262144) ;;
      part128k) env=(HOCCL_TCP_MIN_PART=131072) ;;
    esac
    env "${env[@]}" bash scripts/tcp-nodes.sh "${m[@]}" $P --size small --steps 20 --repeats 3 --comm hoccl,nccl \
      --json $OUT/pipe-small-$s-$v.json > $OUT/pipe-small-$s-$v.log 2>&1
    echo "=== pipeline small $s $v rc=$?"; grep -E "^(hoccl|nccl) " $OUT/pipe-small-$s-$v.log | tail -2
  done
done
HOCCL_NET_TRACE=$OUT/trace-sliced bash scripts/tcp-nodes.sh $P --size small --steps 10 --repeats 1 --comm hoccl \
  --json $OUT/pipe-small-trace.json > $OUT/pipe-small-trace.log 2>&1
echo "=== traced rc=$?"
cd "$OUT" && tar czf logs.tgz *.log *.json && rm -f *.log *.json
