# 2 MiB send/recv and AllGather, unpinned and pinned (each rank on 4 CPUs of its own), alternating
A="sweep --sizes 2MiB --collectives sendrecv,allgather --baselines hoccl,hoccl-window,nccl --sm-size 0"
for i in 1 2 3; do
  timeout 60 torchrun --nproc_per_node 2 -m hoccl_bench.bench $A --out $OUT/free$i > $OUT/free$i.log 2>&1
  echo "== free $i rc=$?"; grep -A7 "^op " $OUT/free$i.log
  timeout 60 torchrun --no-python --nproc_per_node 2 bash -c 'exec taskset -c $((4+4*LOCAL_RANK))-$((7+4*LOCAL_RANK)) python -m hoccl_bench.bench "$@"' _ $A --out $OUT/pin$i > $OUT/pin$i.log 2>&1
  echo "== pinned $i rc=$?"; grep -A7 "^op " $OUT/pin$i.log
done
