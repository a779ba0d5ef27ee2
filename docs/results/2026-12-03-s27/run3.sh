#!/usr/bin/env bash
# Session 27, run 3 on the 1x H200: a run waits only for the nodes that received in the previous run. The
# network GPU suites first (internode, training over TCP nodes, hostile), then the small rows against NCCL in the
# same run (pipeline small 1F1B; FSDP small with NCCL and with HOCCL reducing), 3 interleaved rounds, both settings,
# and pipeline small traced once more.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 240 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_internode.py \
  tests/gpu/test_gpu_training_tcp.py tests/gpu/test_gpu_hostile.py > "$OUT/gpu-tests.log" 2>&1
echo "=== gpu tests rc=$?"; tail -n 4 "$OUT/gpu-tests.log"
export TCP_NODES_TIMEOUT=120
for s in sliced mps; do
  m=(); [ $s = mps ] && m=(--mps)
  bash scripts/tcp-nodes.sh "${m[@]}" examples/train_pipeline.py --size small --steps 20 --repeats 3 --comm hoccl,nccl \
    --json $OUT/pipe-small-$s.json > $OUT/pipe-small-$s.log 2>&1
  echo "=== pipeline small $s rc=$?"; grep -E "^(hoccl|nccl) " $OUT/pipe-small-$s.log | tail -2
  for r in nccl hoccl; do
    bash scripts/tcp-nodes.sh "${m[@]}" examples/train_fsdp.py --size small --steps 20 --repeats 3 --comm hoccl,nccl \
      --reduce $r --timeout 100 --json $OUT/fsdp-small-$r-$s.json > $OUT/fsdp-small-$r-$s.log 2>&1
    echo "=== fsdp small reduce=$r $s rc=$?"; grep -E "^(hoccl|nccl) " $OUT/fsdp-small-$r-$s.log | tail -2
  done
done
HOCCL_NET_TRACE=$OUT/trace-sliced bash scripts/tcp-nodes.sh examples/train_pipeline.py --size small --steps 10 \
  --repeats 1 --comm hoccl --json $OUT/pipe-small-trace.json > $OUT/pipe-small-trace.log 2>&1
echo "=== traced rc=$?"
cd "$OUT" && tar czf logs.tgz *.log *.json && rm -f *.log *.json
