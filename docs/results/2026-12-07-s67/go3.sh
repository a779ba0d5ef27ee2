#!/usr/bin/env bash
# Session 67: `tcp-nodes.sh --compare` on main (lanes that block at once, the default since session 66) at the
# sizes JOBS names (size:mps or size:sliced), as time allows (COMPARE_STEPS, COMPARE_REPEATS, COMPARE_ARGS pass through).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-540}))
for job in ${JOBS:-small:mps small:sliced}; do
  size=${job%%:*} m=${job##*:} to=200; [ "$size" = small ] || to=270; [ "$size" = 1.3b ] && to=400
  if [ $(( END - $(date +%s) )) -lt $to ]; then echo "=== compare $size $m SKIPPED"; continue; fi
  f=""; [ $m = mps ] && f=--mps
  TCP_NODES_TIMEOUT=$((to - 20)) timeout $to bash scripts/tcp-nodes.sh $f --compare $OUT/$size-$m $size > $OUT/$size-$m.log 2>&1
  echo "=== compare $size $m rc=$? $(( $(date +%s) - T0 )) s"
  sed -n '/^=== HOCCL/,$p' $OUT/$size-$m.log
  grep -q '^=== HOCCL' $OUT/$size-$m.log || { echo "(cut)"; python3 examples/compare_table.py $OUT/$size-$m 2>&1 | tail -n 12; }
done
cd $OUT && tar czf logs-go3.tgz *.log small-* 350m-* 1.3b-* 2>/dev/null; rm -rf *.log small-* 350m-* 1.3b-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
