#!/usr/bin/env bash
# session 7, device run 5 (not committed)
set -u
T="torchrun --nproc_per_node 2"
s() { local name=$1 secs=$2; shift 2; local t0=$SECONDS; timeout -k 10 $secs "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s" >> $OUT/summary.txt; }
s tests 300 python -m pytest -q -p no:cacheprovider tests/test_gpu_intranode.py tests/test_gpu_multiprocess.py tests/test_gpu_internode.py
HOCCL_LOCAL_COPIES=peer s sweep-peer 200 $T -m hoccl_runtime.bench sweep --collectives allgather,alltoall --sizes 2MiB:1GiB --baselines hoccl,raw,nccl-ce --out $OUT/peer
HOCCL_LOCAL_COPIES=peer s contention-peer 200 $T -m hoccl_runtime.bench contention --size 268435456 --rates 95,190 --rounds 11 --out $OUT/peer
s contention-sm 200 $T -m hoccl_runtime.bench contention --size 268435456 --rates 95,190 --rounds 11 --out $OUT/sm
tail -3 $OUT/tests.log
echo "== sweep-peer"; grep -E "^(allgather|alltoall) " $OUT/sweep-peer.log
echo "== contention-peer"; tail -20 $OUT/contention-peer.log
echo "== contention-sm"; tail -20 $OUT/contention-sm.log
cat $OUT/summary.txt
