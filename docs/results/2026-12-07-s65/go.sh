#!/usr/bin/env bash
# Session 65, a device call. On an H200 (the issue's machine): `tcp-nodes.sh --mps --compare OUT SIZE` for the
# SIZE:SETTING words in JOBS_H200 (default "small:mps 350m:mps"). On an H100 first a question session 60 left
# planned: FSDP small with HOCCL reducing under MPS ran 0.88-0.97x NCCL on seven hosts, while NCCL gathering beside
# HOCCL's reduce-scatters ran ahead of NCCL alone. With HOCCL reducing a node has two hoccl groups, two proxy
# processes of 8 TCP lanes each, and every lane's two threads spin 300 us after their last frame (HOCCL_TCP_SPIN_US):
# up to 32 spinning threads on the node's 8 pinned CPUs beside the training thread. Do they crowd it? The default,
# lanes that block at once (SPIN_US=0), and 50 us, in one invocation beside NCCL and none; then JOBS_H100.
# Bounds: 200 s a small job, 260 s a 350m one; a job is skipped when less of the call is left than its bound.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
if nvidia-smi -L | grep -q H200; then jobs=${JOBS_H200:-"small:mps 350m:mps"}; else
  jobs=${JOBS_H100:-"small:mps"}
  to=$(( END - $(date +%s) )); [ $to -lt 240 ] && echo "=== spin: less than 240 s left, cut at $to s" || to=240
  TCP_NODES_TIMEOUT=$((to - 20)) timeout $to bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
    --steps 100 --repeats 3 --reduce hoccl --gc-every 50 --json $OUT/spin.json \
    --comm hoccl,hoccl+HOCCL_TCP_SPIN_US=0,hoccl+HOCCL_TCP_SPIN_US=50,nccl,none > $OUT/spin.log 2>&1
  echo "=== spin rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^(comm|hoccl|nccl|none|model|torch)" $OUT/spin.log | grep -v "^\[" | tail -n 12
fi
for job in $jobs; do
  size=${job%%:*} m=${job##*:} to=200; [ "$size" = small ] || to=260
  if [ $(( END - $(date +%s) )) -lt $to ]; then echo "=== compare $size $m SKIPPED"; continue; fi
  f=""; [ $m = mps ] && f=--mps
  TCP_NODES_TIMEOUT=$((to - 20)) timeout $to bash scripts/tcp-nodes.sh $f --compare $OUT/$size-$m $size > $OUT/$size-$m.log 2>&1
  echo "=== compare $size $m rc=$? $(( $(date +%s) - T0 )) s"
  sed -n '/^=== HOCCL/,$p' $OUT/$size-$m.log
  grep -q '^=== HOCCL' $OUT/$size-$m.log || { echo "(cut: compare_table.py on what it left)"; python3 examples/compare_table.py $OUT/$size-$m 2>&1 | tail -n 12; }
done
cd $OUT && tar czf logs-go.tgz *.log small-* 350m-* spin.json 2>/dev/null; rm -rf *.log small-* 350m-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
