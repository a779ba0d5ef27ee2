#!/usr/bin/env bash
# Session 68: JOBS in order on today's main, as time allows (RUN_BUDGET_S): "soak:mps" / "soak:sliced" is
# `tcp-nodes.sh [--mps] --soak 5 OUT 350m` (issue 34's no-hang check, FSDP2 against NCCL 5 times in a row, NCCL
# reducing); "SIZE:mps" / "SIZE:sliced" is `tcp-nodes.sh [--mps] --compare OUT SIZE` (1.3b with
# COMPARE_ARGS="--gc-every 50 --deterministic --warmup 1" COMPARE_STEPS=3 COMPARE_REPEATS=2). CPUs pinned (TCP_NODES_PIN=1).
# JOB_TIMEOUT_1_3B: a 1.3b job's bound in s (330; session 70's --compare 1.3b has a fourth run, FSDP's limit: 420).
# JOBS unset: on an H200 small under MPS and time-sliced first, then the no-hang check; elsewhere the other way round.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-540}))
if [ -z "${JOBS:-}" ]; then  # an H200: its figures first (none since session 55); else the no-hang check first
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then JOBS="small:mps small:sliced soak:mps soak:sliced"
  else JOBS="soak:mps soak:sliced small:mps small:sliced"; fi
fi
for job in $JOBS; do
  what=${job%%:*} m=${job##*:} f=""; [ "$m" = mps ] && f=--mps
  case $what in soak) to=250 ;; small) to=200 ;; 1.3b) to=${JOB_TIMEOUT_1_3B:-330} ;; *) to=270 ;; esac
  if [ $(( END - $(date +%s) )) -lt $to ]; then echo "=== $job SKIPPED (time)"; continue; fi
  if [ "$what" = soak ]; then
    TCP_NODES_TIMEOUT=100 timeout $to bash scripts/tcp-nodes.sh $f --soak 5 "$OUT/soak-$m" 350m > "$OUT/soak-$m.log" 2>&1
    echo "=== $job rc=$? $(( $(date +%s) - T0 )) s"; cat "$OUT/soak-$m.log"
    continue
  fi
  extra=(); [ "$what" = 1.3b ] && extra=(COMPARE_ARGS="--gc-every 50 --deterministic --warmup 1" COMPARE_STEPS=3 COMPARE_REPEATS=2)
  env "${extra[@]}" TCP_NODES_TIMEOUT=$((to - 20)) timeout $to bash scripts/tcp-nodes.sh $f --compare "$OUT/$what-$m" "$what" \
    > "$OUT/$what-$m.log" 2>&1
  echo "=== compare $what $m rc=$? $(( $(date +%s) - T0 )) s"
  sed -n '/^=== HOCCL/,$p' "$OUT/$what-$m.log"
  grep -q '^=== HOCCL' "$OUT/$what-$m.log" || { echo "(cut)"; python3 examples/compare_table.py "$OUT/$what-$m" 2>&1 | tail -n 12; }
done
cd "$OUT" && tar czf logs-go.tgz ./*.log soak-* small-* 350m-* 1.3b-* 2>/dev/null; rm -rf ./*.log soak-* small-* 350m-* 1.3b-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
