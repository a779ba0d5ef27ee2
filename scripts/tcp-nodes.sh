#!/usr/bin/env bash
# A training example with each GPU its own "node" over TCP: two torchrun nodes of one rank on this host (HOCCL: the
# network communicator; NCCL: its socket transport). On a 1-GPU machine both nodes share GPU 0: each node gets its
# own NCCL_HOSTID, so NCCL takes them for two hosts and runs them over sockets (its duplicate-GPU check keys on the
# host id). The first argument is the script, the rest go to it; --json is written by the rank that writes it in the
# script (node 1's for train_pipeline.py).
#   bash scripts/tcp-nodes.sh [--mps] examples/train_fsdp.py --size 350m --batch 2 --steps 10 --repeats 3 --comm hoccl,nccl,none
#   bash scripts/tcp-nodes.sh [--mps] examples/train_pipeline.py --size small --steps 20 --repeats 3 --comm hoccl,nccl
#   bash scripts/tcp-nodes.sh [--mps] --compare OUTDIR [SIZES]     # the whole HOCCL/NCCL comparison (docs/training.md)
#   bash scripts/tcp-nodes.sh [--mps] --soak N OUTDIR [SIZE]        # the no-hang check: FSDP2 against NCCL N times in a row
# --mps: the two processes under MPS (a user-space daemon, started here and stopped at the end; it changes no GPU
# setting): their kernels share the SMs at once instead of time-slicing. TCP_NODES_TIMEOUT bounds each run (s).
# TCP_NODES_PIN=1: each node's processes (torchrun, its rank, HOCCL's proxy process) on half of this host's CPUs
# (taskset; node 0 the first half), as two hosts would have CPUs of their own; both HOCCL and NCCL runs alike.
set -u
mps=0
if [ "${1:-}" = "--mps" ]; then mps=1; shift; fi
usage="usage: tcp-nodes.sh [--mps] SCRIPT [ARGS...] | [--mps] --compare OUTDIR [SIZES] | [--mps] --soak N OUTDIR [SIZE]"
[ $# -ge 1 ] || { echo "$usage"; exit 2; }
if [ "$1" = --soak ]; then  # checked before anything starts: a bad count is refused without a GPU
  case ${2:-} in ''|*[!0-9]*) bad=1 ;; *) bad=$(( 10#$2 < 1 )) ;; esac
  [ "$bad" = 0 ] || { echo "tcp-nodes --soak: the run count '${2:-}' is not a whole number >= 1; $usage"; exit 2; }
  [ -n "${3:-}" ] || { echo "tcp-nodes --soak: no OUTDIR; $usage"; exit 2; }
fi
if [ "$1" = --compare ]; then  # COMPARE_EXAMPLES checked before anything starts
  examples=${COMPARE_EXAMPLES:-fsdp,pipeline}
  IFS=', ' read -r -a names <<<"$examples"  # not globbed: a '*' is refused as a name
  run_fsdp=0 run_pipeline=0
  for e in ${names[@]+"${names[@]}"}; do
    case $e in fsdp) run_fsdp=1 ;; pipeline) run_pipeline=1 ;; '') ;; *)
      echo "tcp-nodes --compare: COMPARE_EXAMPLES='$examples' names '$e'; give fsdp, pipeline or both (fsdp,pipeline)"
      exit 2 ;;
    esac
  done
  [ "$run_fsdp$run_pipeline" != 00 ] \
    || { echo "tcp-nodes --compare: COMPARE_EXAMPLES='$examples' names no example; give fsdp, pipeline or both"; exit 2; }
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || { echo "tcp-nodes: no GPU found (nvidia-smi -L)"; exit 2; }
export NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "$mps" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || { echo "tcp-nodes --mps: nvidia-cuda-mps-control not found"; exit 2; }
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/hoccl-mps-$$} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/hoccl-mpslog-$$}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "tcp-nodes --mps: the MPS daemon did not start"; exit 2; }
  trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
fi

pin=()
if [ "${TCP_NODES_PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { echo "tcp-nodes: TCP_NODES_PIN=1 needs taskset (util-linux)"; exit 2; }
  # the CPUs this process may use, in order, cut in two halves (comma lists for taskset -c)
  read -r -a pin <<<"$(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); h = len(c) // 2
print(",".join(map(str, c[:h])), ",".join(map(str, c[h:])))')"
  [ "${#pin[@]}" = 2 ] || { echo "tcp-nodes: TCP_NODES_PIN=1 needs 2 CPUs or more, this process may use $(nproc)"; exit 2; }
fi

port=${MASTER_PORT:-29533}
run_nodes() {  # SCRIPT ARGS...: both nodes, bounded; the exit status of the first that failed
  local pids=() rc=0 n
  for n in 0 1; do
    CUDA_VISIBLE_DEVICES=$((n % gpus)) NCCL_HOSTID="hoccl-node$n" timeout -k 15 "${TCP_NODES_TIMEOUT:-900}" \
      ${pin[$n]:+taskset -c "${pin[$n]}"} \
      torchrun --nnodes 2 --node-rank "$n" --nproc-per-node 1 --master-addr 127.0.0.1 --master-port "$port" "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  port=$((port + 1))
  return $rc
}

if [ "$1" = "--soak" ]; then
  # --soak N OUTDIR [SIZE]: the no-hang check of issue 34. The FSDP2 comparison (HOCCL gathering against NCCL, NCCL
  # reducing in both; SOAK_ARGS replaces those arguments) N times in a row, each a fresh pair of processes with 3 steps
  # (the first a warm-up) bounded by TCP_NODES_TIMEOUT (120 s unless set) and its process group's timeout (60 s). One log
  # per run under OUTDIR, a line per run (exit status, seconds, the tokens/s lines), then "soak: K of N runs
  # completed"; the exit status is 0 only when all N did (else the last failed run's: 124 for a run that timed out).
  n=$2 out=$3 size=${4:-350m}
  mkdir -p "$out" || exit 2
  setting=$([ "$mps" = 1 ] && echo mps || echo sliced)
  batch=2; [ "$size" = small ] && batch=4
  export TCP_NODES_TIMEOUT=${TCP_NODES_TIMEOUT:-120}
  ok=0 last=0 longest=0
  for i in $(seq 1 "$n"); do
    name=soak-fsdp-$size-$setting-$i t0=$(date +%s)
    # shellcheck disable=SC2086 # SOAK_ARGS is a list of arguments
    run_nodes "$here/examples/train_fsdp.py" --size "$size" --batch "$batch" \
      ${SOAK_ARGS---steps 3 --warmup 1 --repeats 1 --comm hoccl,nccl --reduce nccl --timeout 60} \
      --json "$out/$name.json" >"$out/$name.log" 2>&1
    rc=$? secs=$(( $(date +%s) - t0 ))
    [ "$secs" -gt "$longest" ] && longest=$secs
    if [ "$rc" = 0 ]; then ok=$((ok + 1)); else last=$rc; fi
    echo "=== $name rc=$rc ${secs} s"
    grep -E "^(hoccl|nccl|none)[ +]" "$out/$name.log" | tail -n 3
  done
  echo "soak: $ok of $n runs completed ($setting, FSDP $size, longest ${longest} s, each bounded by ${TCP_NODES_TIMEOUT} s)"
  exit "$last"
fi

if [ "$1" != "--compare" ]; then
  script=$1; shift
  [ -f "$script" ] || { echo "tcp-nodes: no such script: $script"; exit 2; }
  run_nodes "$script" "$@"
  exit $?
fi

# --compare OUTDIR [SIZES]: FSDP2 (NCCL reducing in both variants, then HOCCL reducing: HOCCL's reduce-scatters on a
# hoccl group of their own, use_for_fsdp's default; the NCCL variant gathers with NCCL) and 1F1B pipelining, HOCCL
# against NCCL with the no-communication limit beside both, 3 interleaved rounds each (COMPARE_REPEATS) of 100 steps
# at small and 8 above (COMPARE_STEPS; at small HOCCL's rounds of 30 steps spread 0.7-13.1%, of 100 0.5-4.3%);
# one log and one JSON per run under OUTDIR, the tables of every run printed last, then one table of them all with
# HOCCL / NCCL (examples/compare_table.py, which reads the JSON records). COMPARE_ARGS: more arguments for every run
# (both examples take them), "--gc-every 50" unless set (torchtitan's default: Python's collector off, a generation-1
# collection between steps every 50, so that no full collection of 0.1-0.2 s can land in a timed round); COMPARE_ARGS=""
# leaves the collector as Python runs it. At the sizes in COMPARE_NONE_APART (default 1.3b) FSDP's limit runs on its
# own (fsdp-SIZE-none-SETTING), not beside HOCCL and NCCL: there the three models of a run (each FSDP variant's half
# of the weights, gradients and Adam state, and the limit's whole replica) do not fit two ranks on an 80 GB GPU: the
# limit's first Adam step ran out of memory with 39.5 GB in use by each rank (1x H100, session 70).
# COMPARE_EXAMPLES: which examples run (fsdp, pipeline; both unless set), e.g. fsdp alone to repeat its rows.
out=${2:?usage: tcp-nodes.sh [--mps] --compare OUTDIR [SIZES]}
sizes=${3:-small,350m,1.3b}
mkdir -p "$out"
setting=$([ "$mps" = 1 ] && echo mps || echo sliced)
reps=${COMPARE_REPEATS:-3}
results=()
for size in ${sizes//,/ }; do
  case $size in
    small) fb=4; fs=${COMPARE_STEPS:-100}; pb=8; ps=${COMPARE_STEPS:-100} ;;
    *)     fb=2; fs=${COMPARE_STEPS:-8};  pb=8; ps=${COMPARE_STEPS:-8} ;;
  esac
  limit=,none
  [[ ",${COMPARE_NONE_APART-1.3b}," == *",$size,"* ]] && limit=""
  if [ "$run_fsdp" = 1 ]; then
    for red in nccl hoccl; do
      name=fsdp-$size-reduce-$red-$setting
      run_nodes "$here/examples/train_fsdp.py" --size "$size" --batch "$fb" --steps "$fs" --repeats "$reps" \
        --comm "hoccl,nccl$limit" --reduce "$red" --json "$out/$name.json" ${COMPARE_ARGS---gc-every 50} \
        >"$out/$name.log" 2>&1
      results+=("$name rc=$?")
    done
    if [ -z "$limit" ]; then
      name=fsdp-$size-none-$setting
      run_nodes "$here/examples/train_fsdp.py" --size "$size" --batch "$fb" --steps "$fs" --repeats "$reps" \
        --comm none --json "$out/$name.json" ${COMPARE_ARGS---gc-every 50} >"$out/$name.log" 2>&1
      results+=("$name rc=$?")
    fi
  fi
  if [ "$run_pipeline" = 1 ]; then
    name=pipeline-$size-$setting
    run_nodes "$here/examples/train_pipeline.py" --size "$size" --batch "$pb" --steps "$ps" --repeats "$reps" \
      --comm hoccl,nccl,none --json "$out/$name.json" ${COMPARE_ARGS---gc-every 50} >"$out/$name.log" 2>&1
    results+=("$name rc=$?")
  fi
done
for r in "${results[@]}"; do
  name=${r%% *}
  echo "=== $r"
  grep -E "^(comm|hoccl|nccl|none|model|torch) " "$out/$name.log" | grep -v "^\[" | tail -n 8
done
echo "=== HOCCL / NCCL, every run above (python3 examples/compare_table.py $out)"
python3 "$here/examples/compare_table.py" "$out" || echo "(no table: see the runs' logs under $out)"
