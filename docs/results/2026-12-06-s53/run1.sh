#!/usr/bin/env bash
# Session 53's run 1: session 52's planned run 3 (docs/results/2026-12-06-s52/planned-run3.sh), as it was. FSDP small under MPS
# is host-bound in its forward (run 1: the training thread issued the block AllGathers 2.42-2.50 ms apart while each
# took 1.06-1.15 ms from its later stream to both ranks' copies). Where that host time goes, HOCCL against NCCL in one
# invocation: hosttime.py times FSDP2's per-module hooks, its copy-in + AllGather and copy-out, and the AllGather's
# allocate() and __call__ on the training thread; hoccl+window=0 takes the AllGather outputs from torch's allocator
# instead of use_for_fsdp's window (a network communicator gains nothing from a window; its allocate() makes a tensor
# through CuPy and DLPack per call).
# First a layer's AllGather alone (examples/profile_fsdp_hook.py, its new allocate() rows). Two TCP nodes of one rank
# sharing the GPU, CPUs pinned, 5 interleaved rounds of 20 steps; then the same untimed (the wrapper's own cost out
# of the figures), then time-sliced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=110
D=docs/results/2026-12-06-s52
V="hoccl,hoccl+window=0,nccl"
# a layer's AllGather (6 MiB out) alone, each rank its own TCP node: host us of the call (communicator, FSDP hook,
# backend) and of FSDP's allocate() before it, from the window and from torch's allocator
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  TCP_NODES_TIMEOUT=60 timeout 70 bash scripts/tcp-nodes.sh $f examples/profile_fsdp_hook.py --size 6MiB \
    > $OUT/hook-$m.log 2>&1
  echo "=== profile_fsdp_hook $m rc=$?"; grep -A7 "^AllGather of" $OUT/hook-$m.log
done
HOSTTIME_OUT=$OUT/hosttime timeout 120 bash scripts/tcp-nodes.sh --mps $D/hosttime.py examples/train_fsdp.py \
  --size small --batch 4 --reduce nccl --comm $V --steps 20 --repeats 5 --json $OUT/timed.json > $OUT/timed.log 2>&1
echo "=== fsdp small mps timed rc=$?"; grep -E "^(comm|hoccl|nccl)[ +]" $OUT/timed.log; cat $OUT/hosttime.rank*.txt
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  timeout 120 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small --batch 4 --reduce nccl \
    --comm $V,none --steps 20 --repeats 5 --json $OUT/fsdp-$m.json > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-$m.log
done
cd $OUT && tar czf logs-run1.tgz *.log *.json *.txt 2>/dev/null; rm -rf *.log *.json cache
