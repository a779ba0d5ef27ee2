#!/usr/bin/env bash
# Session 53, run 2: this session's two host-path changes A/B in one invocation each, against NCCL. "hoccl" is today's
# main: no use_for_fsdp window across nodes, and the proxy process looking at its socket for 50 ms after each call's
# message (HOCCL_NET_PROXY_AWAKE_US=50000) so that the training thread's write wakes nobody. Variants put back each
# old behaviour alone: +HOCCL_NET_PROXY_AWAKE_US=0 (the proxy sleeps in its socket), +window=67108864 (a window, as
# the old default made). FSDP small and pipeline small, under MPS then time-sliced; two TCP nodes of one rank sharing
# the GPU, CPUs pinned, 5 interleaved rounds of 20 steps.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
step() {  # step NAME TIMEOUT LOG cmd...: run cmd under timeout if it fits, else say it was skipped
  local name=$1 to=$2 log=$3; shift 3
  if ! fits "$to"; then echo "=== $name SKIPPED ($(( END - $(date +%s) )) s left < $to)"; return 1; fi
  local t0=$(date +%s); timeout "$to" "$@" > "$OUT/$log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - t0 )) s"; return $rc
}
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$OUT/$1" | tail -n "${2:-8}"; }
AW=hoccl+HOCCL_NET_PROXY_AWAKE_US=0
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  export TCP_NODES_TIMEOUT=110
  step "fsdp small $m" 120 fsdp-small-$m.log bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm hoccl,$AW,hoccl+window=67108864,nccl --steps 20 --repeats 5 \
    --json $OUT/fsdp-small-$m.json
  table fsdp-small-$m.log
  export TCP_NODES_TIMEOUT=60
  step "pipeline small $m" 70 pipeline-small-$m.log bash scripts/tcp-nodes.sh $f examples/train_pipeline.py \
    --size small --batch 8 --comm hoccl,$AW,nccl --steps 20 --repeats 5 --json $OUT/pipeline-small-$m.json
  table pipeline-small-$m.log
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -rf *.log *.json cache
echo "=== total $(( $(date +%s) - T0 )) s"
