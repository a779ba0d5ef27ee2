#!/usr/bin/env bash
# (overlap.patch: `git diff main wip/overlap-runs -- hoccl_runtime` as the branch stood then: commit eb38143 for run 5,
# 0eb1c3f for run 6; both are on main since 9bd9939, so today this script needs no patch)
# Session 56, run 5: the branch wip/overlap-runs (HOCCL_NET_OVERLAP: consecutive runs on alternate halves of every
# ring, a run waiting only for the nodes that received two runs back), applied as overlap.patch on today's main,
# against the default and NCCL: FSDP small (NCCL reducing) and pipeline small under MPS, then time-sliced, 5 rounds of
# 30 steps, --gc-every 50; one traced FSDP small run of it under MPS. Two TCP nodes of one rank sharing the GPU, CPUs
# pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
(patch -p1 --forward < overlap.patch > $OUT/patch.log 2>&1 || git apply overlap.patch) || { echo "patch failed"; cat $OUT/patch.log; exit 1; }
grep -c "HOCCL_NET_OVERLAP" hoccl_runtime/settings.py
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s); END=$((T0 + ${RUN_BUDGET_S:-420}))
fits() { [ $(( END - $(date +%s) )) -ge "$1" ]; }
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
V=hoccl,hoccl+HOCCL_NET_OVERLAP=1,nccl
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  fits 100 && { TCP_NODES_TIMEOUT=110 timeout 120 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small \
    --batch 4 --reduce nccl --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/fsdp-$m.json \
    > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log; tail -n 3 $OUT/fsdp-$m.log | cut -c1-300; }
  fits 80 && { TCP_NODES_TIMEOUT=90 timeout 100 bash scripts/tcp-nodes.sh $f examples/train_pipeline.py --size small \
    --batch 8 --comm $V --steps 30 --repeats 5 --gc-every 50 --json $OUT/pipeline-$m.json > $OUT/pipeline-$m.log 2>&1
  echo "=== pipeline small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-$m.log; }
done
fits 45 && { HOCCL_NET_OVERLAP=1 HOCCL_NET_TRACE=$OUT/trace TCP_NODES_TIMEOUT=40 timeout 45 bash scripts/tcp-nodes.sh \
  --mps examples/train_fsdp.py --size small --batch 4 --reduce nccl --comm hoccl --steps 20 --repeats 2 \
  --json $OUT/traced.json > $OUT/traced.log 2>&1
  echo "=== traced overlap rc=$?"; table $OUT/traced.log; python3 -m hoccl_runtime.net.trace $OUT/trace 2>&1 | head -14; }
cd $OUT && tar czf logs-run5.tgz *.log *.json trace* 2>/dev/null; rm -rf *.log *.json trace* cache
echo "=== total $(( $(date +%s) - T0 )) s"
