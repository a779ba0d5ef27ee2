#!/usr/bin/env bash
# session 7, device run 3 (not committed)
set -u
T="torchrun --nproc_per_node 2"
s() { local name=$1 secs=$2; shift 2; local t0=$SECONDS; timeout -k 10 $secs "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s" >> $OUT/summary.txt; }
s mpworker 150 $T tests/mp_worker.py
s sweep 300 $T -m hoccl_runtime.bench sweep --sizes 2MiB:1GiB --baselines hoccl,hoccl-inplace,raw,nccl,nccl-ce --out $OUT
s sr-eager 120 $T -m hoccl_runtime.bench sweep --collectives sendrecv --sizes 2MiB:8MiB --baselines hoccl --sm-size 2097152 --out $OUT/eager
HOCCL_EAGER_BYTES=0 s sr-eager0 120 $T -m hoccl_runtime.bench sweep --collectives sendrecv --sizes 2MiB:8MiB --baselines hoccl --sm-size 2097152 --out $OUT/eager0
s contention 300 $T -m hoccl_runtime.bench contention --size 268435456 --loads gemm --in-place --rates 70 --rounds 15 --out $OUT
s tests 300 python -m pytest -q -p no:cacheprovider tests/test_gpu_intranode.py tests/test_gpu_multiprocess.py tests/test_gpu_internode.py
grep -E "SM-free|needs SMs|ALL OK|FAIL|failure" $OUT/mpworker.log | sort | uniq | head -40
for f in sweep sr-eager sr-eager0; do echo "== $f"; grep -E "^(sendrecv|allgather|alltoall) " $OUT/$f.log | grep -E " (2|64|1024) MiB|SM" ; done
echo "== contention"; tail -12 $OUT/contention.log
tail -3 $OUT/tests.log; cat $OUT/summary.txt
