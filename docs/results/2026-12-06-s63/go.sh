#!/usr/bin/env bash
# Session 63, a device call: `tcp-nodes.sh [--mps] --compare OUT SIZE` (FSDP2 NCCL- and HOCCL-reducing and the 1F1B
# pipeline, hoccl / nccl / none, 3 interleaved rounds; CPUs pinned) for the SIZE:SETTING words in JOBS, on today's
# main. Bounds: 200 s a small job, 260 s a 350m one (session 60's run1.sh gave 120 s and 200 s, and session 62 saw both
# cut). A job is skipped when less of the call is left than its bound. JOBS defaults to the H200 list (the issue's
# machine) or, on an H100, to the rows host H left missing.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=uuid --format=csv,noheader
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-585}))
if nvidia-smi -L | grep -q H200; then jobs=${JOBS_H200:-"small:mps 350m:mps"}; else
  jobs=${JOBS_H100:-"small:mps"}
  # On an H100 first a question about FSDP small with HOCCL reducing under MPS, whose backward lost to NCCL gathering
  # beside HOCCL's reduce-scatters (host G, session 61): do the two hoccl groups' proxy processes, 8 TCP lanes each
  # (a sender and a receiver thread per lane) on the node's 8 pinned CPUs, crowd each other? Fewer lanes, and one
  # group for both kinds of call, in one invocation beside the default and NCCL.
  to=$(( END - $(date +%s) )); [ $to -lt 240 ] && echo "=== lanes: less than 240 s left, cut at $to s" || to=240
  TCP_NODES_TIMEOUT=$((to - 20)) timeout $to bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
    --steps 100 --repeats 3 --reduce hoccl --gc-every 50 --json $OUT/lanes.json \
    --comm hoccl,hoccl+HOCCL_NET_LANES=4,hoccl+HOCCL_NET_LANES=2,hoccl-onegroup,nccl,none > $OUT/lanes.log 2>&1
  echo "=== lanes rc=$? $(( $(date +%s) - T0 )) s"
  grep -E "^(comm|hoccl|nccl|none|model|torch)" $OUT/lanes.log | grep -v "^\[" | tail -n 12
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
cd $OUT && tar czf logs-go.tgz *.log small-* 350m-* lanes.json 2>/dev/null; rm -rf *.log small-* 350m-* cache
echo "=== total $(( $(date +%s) - T0 )) s"
