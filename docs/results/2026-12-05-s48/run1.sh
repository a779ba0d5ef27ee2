#!/usr/bin/env bash
# Session 48, run 1 (not run: no device was lent in session 48; for the next session): landing gates opened by the
# native engine's receiving threads (HOCCL_NET_LAND_GATES=1) and writes posted ahead that its watcher lets go once the
# staging copy shows done (HOCCL_NET_SEND_GATES=1), against the default (0: the proxy's loop doing either), the
# landing gates alone, and smaller network chunks with both on, over two TCP nodes sharing the GPU (FSDP small
# NCCL-reducing and 1F1B pipeline small, 5 interleaved rounds, CPUs pinned, both settings; FSDP small reduced by HOCCL
# under MPS too); then FSDP small under MPS traced, a gated copy's latency under MPS alone and beside a busy process,
# and the training-over-TCP GPU tests with both gates on.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
t0=$(date +%s)
timeout 120 python3 -m pytest -q -p no:randomly tests/transport/test_transport_native.py tests/runtime/test_netcomm_cpu.py \
  -k "gate or ahead" > $OUT/gate-cpu.log 2>&1
echo "=== gate CPU tests rc=$? $(( $(date +%s) - t0 )) s"; tail -n 1 $OUT/gate-cpu.log
G1="HOCCL_NET_LAND_GATES=1+HOCCL_NET_SEND_GATES=1"
F="hoccl,hoccl+$G1,hoccl+HOCCL_NET_LAND_GATES=1,hoccl+$G1+HOCCL_NET_CHUNK_BYTES=1048576,hoccl+$G1+HOCCL_NET_CHUNK_BYTES=524288,nccl"
P="hoccl,hoccl+$G1,hoccl+$G1+HOCCL_NET_CHUNK_BYTES=524288,nccl"
for m in mps sliced; do
  flag=""; [ $m = mps ] && flag="--mps"
  for s in fsdp pipeline; do
    t0=$(date +%s); a="--batch 4 --reduce nccl --comm $F"; [ $s = pipeline ] && a="--batch 8 --comm $P"
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 timeout 240 bash scripts/tcp-nodes.sh $flag examples/train_$s.py --size small $a \
      --steps 20 --repeats 5 --json $OUT/$s-small-$m.json > $OUT/$s-small-$m.log 2>&1
    echo "=== $s small $m rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/$s-small-$m.log | tail -n 6
  done
done
t0=$(date +%s)  # FSDP small reduced by HOCCL (its own group) under MPS: the row whose CPU slack was below NCCL's
TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 timeout 200 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small \
  --batch 4 --reduce hoccl --comm hoccl,hoccl+$G1,nccl --steps 20 --repeats 5 --json $OUT/fsdp-hred-small-mps.json \
  > $OUT/fsdp-hred-small-mps.log 2>&1
echo "=== fsdp small reduce=hoccl mps rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-hred-small-mps.log | tail -n 4
mkdir -p $OUT/tr; t0=$(date +%s)
HOCCL_NET_TRACE=$OUT/tr/fsdp TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 timeout 200 bash scripts/tcp-nodes.sh --mps \
  examples/train_fsdp.py --size small --batch 4 --steps 20 --repeats 3 --reduce nccl \
  --comm hoccl,hoccl+$G1,nccl --json $OUT/fsdp-trace.json > $OUT/fsdp-trace.log 2>&1
echo "=== fsdp small mps traced rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-trace.log | tail -n 4
python3 docs/results/2026-12-05-s47/chain.py $OUT/tr/fsdp 2>&1 | head -n 24
python3 docs/results/2026-12-05-s47/chain.py $OUT/tr/fsdp.g1 2>&1 | head -n 24
python3 -m hoccl_runtime.net.trace $OUT/tr/fsdp.g1 2>&1 | grep "landing gates"
for p in fsdp fsdp.g1; do echo "== react.py $p"; python3 docs/results/2026-12-05-s48/react.py $OUT/tr/$p 2>&1; done
# a gated copy's latency (session 32's gatelat.py: gate opened -> done seen) under MPS, alone and beside a process
# that keeps the SMs busy: is the ~150-200 us between a last chunk's mark and its landing seen the GPU's?
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps48 CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog48; mkdir -p /tmp/mps48 /tmp/mpslog48
nvidia-cuda-mps-control -d && {
  echo "=== gatelat under MPS, alone"; timeout 120 python3 docs/results/2026-12-04-s32/gatelat.py 2>&1 | tail -n 9
  timeout 150 python3 docs/results/2026-12-05-s48/busy.py 40 > $OUT/busy.log 2>&1 & sleep 12
  echo "=== gatelat under MPS, beside busy.py"; timeout 120 python3 docs/results/2026-12-04-s32/gatelat.py 2>&1 | tail -n 9
  wait; cat $OUT/busy.log; echo quit | nvidia-cuda-mps-control; }
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
t0=$(date +%s)
HOCCL_NET_LAND_GATES=1 HOCCL_NET_SEND_GATES=1 timeout 200 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py > $OUT/gpu-tcp.log 2>&1
echo "=== GPU TCP training tests rc=$? $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/gpu-tcp.log
cd $OUT && tar czf logs-run1.tgz *.log *.json tr 2>/dev/null; rm -rf *.log *.json tr cache
