#!/usr/bin/env bash
# Session 45, run 3, asked of the 1x H200 kind, ran on a 1x H100 at commit 41de155: use_for_fsdp's new default (the
# reduce-scatters on a second hoccl group, made by use_for_fsdp) on a GPU: the FSDP example's GPU test (hoccl and hoccl-onegroup, --deterministic, equal losses), then
# FSDP small reduced by HOCCL under MPS, hoccl / hoccl-onegroup / nccl (NCCL gathering), 3 rounds, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
timeout 150 python3 -m pytest -q -x tests/gpu/test_gpu_torch.py -k "train_fsdp" > $OUT/gputests.log 2>&1
echo "=== gpu tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|error|FAILED|ERROR" $OUT/gputests.log | tail -8
name=fsdp-small-reduce-hoccl-mps; t0=$(date +%s)
TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=100 bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --reduce hoccl --comm hoccl,hoccl-onegroup,nccl --json $OUT/$name.json > $OUT/$name.log 2>&1
echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(model|comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 5
cd $OUT && tar czf logs-run3.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
