#!/usr/bin/env bash
# Session 29, run 1 on the 1x H200: (a) the TCP transport's 1 MiB and 4 MiB write, one way and both ways, whole on
# one lane (HOCCL_TCP_MIN_PART 1 MiB, the default) against cut in 256 KiB parts over 4 lanes; (b) pipeline small
# (1F1B, 2 stages) HOCCL / NCCL / none (the new no-communication limit), 3 interleaved rounds, both settings, the
# default and 256 KiB parts, traced (HOCCL_NET_TRACE) so that a send's network part can be read per variant.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
for mp in 1048576 262144; do
  for both in "" --both; do
    echo "=== bench_tcp min_part $mp $both"
    HOCCL_TCP_MIN_PART=$mp timeout 120 python examples/bench_tcp.py --sizes 1MiB,4MiB --lanes 8 $both 2>&1 | tail -3
  done
done
P=examples/train_pipeline.py
for s in sliced mps; do
  m=(); [ $s = mps ] && m=(--mps)
  for v in default part256k; do
    env=(HOCCL_TCP_MIN_PART=1048576)  # the default's traces are session 27's (network part 285-342 us)
    [ $v = part256k ] && env=(HOCCL_NET_TRACE=$OUT/trace-$s-$v HOCCL_TCP_MIN_PART=262144)
    env "${env[@]}" bash scripts/tcp-nodes.sh "${m[@]}" $P --size small --steps 20 --repeats 3 --comm hoccl,nccl,none \
      --json $OUT/pipe-small-$s-$v.json > $OUT/pipe-small-$s-$v.log 2>&1
    echo "=== pipeline small $s $v rc=$?"; grep -E "^(comm|hoccl|nccl|none) " $OUT/pipe-small-$s-$v.log | tail -4
  done
done
cd "$OUT" && tar czf logs.tgz *.log *.json && rm -f *.log *.json
