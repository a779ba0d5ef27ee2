#!/usr/bin/env bash
# Session 47, run 1: the native TCP lane engine (HOCCL_TCP_ENGINE=native) on the GPU machine.
# PART=check: the compiler, the engine's CPU tests, the TCP-nodes GPU tests on the native engine, and a one-way
#   latency ping-pong of TcpTransport writes (session 32's tping.py) on each engine.
# PART=mps / sliced: pipeline small (1F1B) and FSDP small (NCCL reducing) over two TCP nodes sharing the GPU,
#   HOCCL on the Python lanes (hoccl), HOCCL on the native engine (hoccl+HOCCL_TCP_ENGINE=native) and NCCL in the same
#   interleaved rounds (5), CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache
case ${PART:-check} in
  check)
    (cc --version | head -1) 2>&1
    python3 -c "from hoccl_runtime.net.transport import native; print('engine', native.engine_library()[0])"
    t0=$(date +%s)
    timeout 200 python3 -m pytest -q -p no:randomly tests/transport/test_transport_native.py > $OUT/native-cpu.log 2>&1
    echo "=== native CPU tests rc=$? $(( $(date +%s) - t0 )) s"; tail -n 2 $OUT/native-cpu.log
    t0=$(date +%s)
    HOCCL_TCP_ENGINE=native timeout 330 python3 -m pytest -q -p no:randomly tests/gpu/test_gpu_training_tcp.py \
      tests/gpu/test_gpu_internode.py > $OUT/gpu-native.log 2>&1
    echo "=== GPU TCP tests on the native engine rc=$? $(( $(date +%s) - t0 )) s"; tail -n 4 $OUT/gpu-native.log
    for e in thread native; do
      for lanes in 8 1; do
        echo -n "engine=$e "; HOCCL_TCP_ENGINE=$e LANES=$lanes ROUNDS=300 timeout 60 python3 docs/results/2026-12-04-s32/tping.py
      done
    done ;;
  sliced|mps)
    flag=""; [ $PART = mps ] && flag="--mps"
    C="hoccl,hoccl+HOCCL_TCP_ENGINE=native,nccl"
    t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh $flag examples/train_pipeline.py --size small \
      --batch 8 --steps 20 --repeats 5 --comm $C,none --json $OUT/pipeline-small-$PART.json > $OUT/pipeline-small-$PART.log 2>&1
    echo "=== pipeline small $PART rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/pipeline-small-$PART.log | tail -n 5
    t0=$(date +%s)
    TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh $flag examples/train_fsdp.py --size small \
      --batch 4 --steps 20 --repeats 5 --reduce nccl --comm $C --json $OUT/fsdp-small-$PART.json > $OUT/fsdp-small-$PART.log 2>&1
    echo "=== fsdp small $PART rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-small-$PART.log | tail -n 5
    for f in $OUT/*-small-$PART.json; do  # tok/s per round of each variant (rank 0)
      python3 -c "
import json
d = json.load(open('$f'))
rows = {k: v[-1]['tokens_per_s_rounds'] for k, v in d['by_comm'].items()} if 'by_comm' in d else \
    {k: v['rounds_tokens_per_s'] for k, v in d['summary'].items()}
for name, r in rows.items():
    print('$(basename $f .json)', name, [round(x) for x in r])
"
    done ;;
  trace)  # FSDP small under MPS, both engines traced (HOCCL_NET_TRACE: the thread engine's group first, .g1 native)
    mkdir -p $OUT/tr; t0=$(date +%s)
    HOCCL_NET_TRACE=$OUT/tr/fsdp TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=200 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
      --size small --batch 4 --steps 20 --repeats 3 --reduce nccl --comm hoccl,hoccl+HOCCL_TCP_ENGINE=native,nccl \
      --json $OUT/fsdp-trace.json > $OUT/fsdp-trace.log 2>&1
    echo "=== fsdp small mps traced rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-trace.log | tail -n 4
    python3 -m hoccl_runtime.net.trace $OUT/tr/fsdp $OUT/tr/fsdp.g1 2>&1 | tail -n 40
    cp $OUT/tr/* $OUT/ 2>/dev/null; for f in $OUT/*.csv; do mv "$f" "${f%.csv}.log"; done ;;
esac
cd $OUT && tar czf logs-run1-${PART:-check}.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
