#!/usr/bin/env bash
# session 7, device run 4 (not committed)
set -u
T="torchrun --nproc_per_node 2"
s() { local name=$1 secs=$2; shift 2; local t0=$SECONDS; timeout -k 10 $secs "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s" >> $OUT/summary.txt; }
s mpworker 150 $T tests/mp_worker.py
s contention 400 $T -m hoccl_runtime.bench contention --size 268435456 --in-place --rates 95,190 --rounds 15 --out $OUT
grep -E "SM-free|needs SMs|ALL OK|FAIL|paced at" $OUT/mpworker.log | sort | uniq | head -40
echo "== contention"; tail -32 $OUT/contention.log
cat $OUT/summary.txt
