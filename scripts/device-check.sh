#!/usr/bin/env bash
# One full check on the 2-GPU machine (device tool), logs under $OUT:
#   source .whl/prelude.sh && bash scripts/device-check.sh [tests] [nettests] [profile] [sweep] [sweepq] [internode] [netcurves] [contention]
#                                                          [torch] [onegpu] [torchbench] [fsdpcompare] [fsdptcp] [pipecompare]
#                                                          [pipetcp] [netcosts] [calibrate] [skew]
# fsdpcompare / fsdptcp: train_fsdp.py, HOCCL against NCCL, one node over NVLink / each GPU its own node over TCP
# (NCCL on its socket transport); FSDP_SIZE, FSDP_REDUCE (nccl|hoccl), FSDP_STEPS, FSDP_REPEATS, FSDP_COMMS,
# FSDP_EXTRA (more flags, e.g. --share-gpu on one GPU) and FSDP_S (the part's seconds) set each run.
# pipecompare / pipetcp: train_pipeline.py (2 stages), HOCCL P2P against NCCL P2P in the same two settings;
# PIPE_SIZE, PIPE_STEPS, PIPE_REPEATS, PIPE_COMMS, PIPE_EXTRA, PIPE_S as for FSDP.
# torch: the torch integration's GPU tests (every rank on GPU 0: runs on the 1-GPU machine too); onegpu: every GPU
# test that runs on one GPU (torch, start-up, hardening, the 2-process communicator's checks); torchbench: host
# time per AllGather call (hook, communicator, backend) and train_fsdp's tokens/s; fsdpcompare (2+ GPUs): HOCCL
# against NCCL and NCCL's copy-engine mode in FSDP2 training, interleaved rounds; netcosts: the network path's call
# and per-transfer costs on nine node shapes (the cost model v2's net_call_us, net_flow_us and net_node_flow_us;
# every node's buffers on GPU 0); calibrate (after sweep): the cost model
# v2's predictions beside this run's sweep rows; skew: the sweep's start-up skew, one size timed with 10, 40 and 160
# calls per batch (a call's cost + skew / calls: calibrate_cost.py --skew-from).
# Each part is bounded in time; a summary of every part is printed last. CONTENTION_ARGS replaces the
# contention part's arguments (CONTENTION_S its time bound in seconds).
set -u
OUT=${OUT:-/tmp/hoccl-out}; mkdir -p "$OUT"
parts=${*:-tests profile sweep internode}
summary=()
run_part() {  # name, seconds, command...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s")
}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv >"$OUT/gpu.txt" 2>&1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')  # sweep and contention use every GPU (issue 6: 4 or 8)
[ "$NGPU" -ge 2 ] || NGPU=2
{ nvidia-smi topo -m; lscpu | grep -i "numa\|model name"; } >>"$OUT/gpu.txt" 2>&1
SHAPES="--shapes 2x1,3x1,4x1,5x1,2x2,3x2,4x2,2x3,2x4"  # netcosts: nodes x GPUs per node
for p in $parts; do
  case $p in
    tests) run_part tests 400 python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_intranode.py \
             tests/gpu/test_gpu_multiprocess.py tests/gpu/test_gpu_internode.py tests/gpu/test_gpu_links.py ;;
    nettests) run_part nettests 200 python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_internode.py ;;
    mptests) run_part mptests 300 python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_multiprocess.py ;;
    mpworker) run_part mpworker 200 torchrun --nproc_per_node 2 tests/support/mp_worker.py "$OUT/mpworker.json" ;;
    handshake) run_part handshake 120 python examples/handshake_latency.py ;;
    profile) run_part profile 120 torchrun --nproc_per_node 2 examples/profile_host.py ;;
    sweep) run_part sweep 400 torchrun --nproc_per_node "$NGPU" -m hoccl_bench.bench sweep --out "$OUT" ;;
    sweepq) for q in 2 4; do  # several copy streams per GPU (NVSwitch machines run several copy engines at once)
              HOCCL_DMA_QUEUES=$q run_part "sweepq$q" 300 torchrun --nproc_per_node "$NGPU" -m hoccl_bench.bench sweep \
                --baselines hoccl,hoccl-inplace,hoccl-window --sm-size 0 --out "$OUT/dma-queues-$q"; done ;;
    internode) run_part internode 330 python examples/bench_internode.py --rounds 4 --out "$OUT" ;;
    netcurves) run_part netcurves 500 python examples/bench_internode.py --no-variants --curves allgather,alltoall \
                 --curve-gpus $((NGPU / 2)) --out "$OUT" ;;
    contention) run_part contention "${CONTENTION_S:-300}" torchrun --nproc_per_node "$NGPU" -m hoccl_bench.bench \
                  contention ${CONTENTION_ARGS:---rounds 15 --in-place --peer --rates 50,100,200,300} --out "$OUT" ;;
    torch) run_part torch 500 python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_torch.py tests/gpu/test_gpu_start.py ;;
    onegpu) run_part onegpu 590 python -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_gpu_torch.py \
              tests/gpu/test_gpu_start.py tests/gpu/test_gpu_hostile.py tests/gpu/test_gpu_multiprocess.py \
              tests/gpu/test_gpu_links.py ;;
    netcosts) run_part netcosts 400 bash -c "python examples/measure_net_costs.py $SHAPES --json $OUT/net_host.json && \
                python examples/measure_net_costs.py --gpu $SHAPES --json $OUT/net_gpu.json" ;;
    skew) for it in 10 40 160; do  # the sweep's start-up skew: one size, three batch lengths (calibrate_cost.py)
            run_part "skew$it" 200 torchrun --nproc_per_node "$NGPU" -m hoccl_bench.bench sweep --sizes 64MiB \
              --baselines hoccl,raw --iters "$it" --sm-size 0 --out "$OUT/skew-$it"; done
          run_part skew 60 python examples/calibrate_cost.py --skew-from "$OUT"/skew-*/sweep.json ;;
    calibrate) run_part calibrate 120 python examples/calibrate_cost.py --sweep "$OUT/sweep.json" \
                 --json "$OUT/calibration.json" ;;
    torchbench) run_part torchbench 300 bash -c "torchrun --nproc_per_node 2 examples/profile_fsdp_hook.py --share-gpu \
                  && torchrun --nproc_per_node 2 examples/train_fsdp.py --size 350m --steps 8 --share-gpu \
                  --json $OUT/train_fsdp_shared.json" ;;
    fsdpcompare) run_part fsdpcompare "${FSDP_S:-500}" torchrun --nproc_per_node "$NGPU" examples/train_fsdp.py \
                   --size "${FSDP_SIZE:-1.3b}" --batch 2 --steps "${FSDP_STEPS:-6}" --repeats "${FSDP_REPEATS:-3}" \
                   --comm "${FSDP_COMMS:-hoccl,nccl,nccl-ce}" --reduce "${FSDP_REDUCE:-nccl}" \
                   --json "$OUT/train_fsdp_compare-${FSDP_SIZE:-1.3b}-${FSDP_REDUCE:-nccl}.json" ;;
    fsdptcp) run_part fsdptcp "${FSDP_S:-500}" bash scripts/tcp-nodes.sh examples/train_fsdp.py --size "${FSDP_SIZE:-1.3b}" --batch 2 \
               --steps "${FSDP_STEPS:-6}" --repeats "${FSDP_REPEATS:-3}" --comm "${FSDP_COMMS:-hoccl,nccl}" \
               --reduce "${FSDP_REDUCE:-nccl}" ${FSDP_EXTRA:-} \
               --json "$OUT/train_fsdp_tcp-${FSDP_SIZE:-1.3b}-${FSDP_REDUCE:-nccl}.json" ;;
    pipecompare) run_part pipecompare "${PIPE_S:-400}" torchrun --nproc_per_node 2 examples/train_pipeline.py \
                   --size "${PIPE_SIZE:-small}" --steps "${PIPE_STEPS:-50}" --repeats "${PIPE_REPEATS:-3}" \
                   --comm "${PIPE_COMMS:-hoccl,nccl}" ${PIPE_EXTRA:-} --json "$OUT/train_pipeline_compare.json" ;;
    pipetcp) run_part pipetcp "${PIPE_S:-400}" bash scripts/tcp-nodes.sh examples/train_pipeline.py \
               --size "${PIPE_SIZE:-small}" --steps "${PIPE_STEPS:-50}" --repeats "${PIPE_REPEATS:-3}" \
               --comm "${PIPE_COMMS:-hoccl,nccl}" ${PIPE_EXTRA:-} --json "$OUT/train_pipeline_tcp.json" ;;
    *) summary+=("$p: unknown part") ;;
  esac
done
for p in $parts; do for f in "$OUT/$p.log" "$OUT/${p}2.log" "$OUT/${p}4.log"; do
  [ -f "$f" ] && { echo "=== $(basename "$f" .log)"; tail -n 40 "$f"; }; done; done
printf '%s\n' "${summary[@]}"
