#!/usr/bin/env bash
# Session 54, run 2: run 1 found FSDP small under MPS on this host GPU-bound with HOCCL (slack +3.4 ms against NCCL's
# +1.0; forward 11.5 against 6.5 ms): the AllGathers' bytes, not the host, are late. So the chunk size the network
# communicator's plans pipeline by (HOCCL_NET_CHUNK_BYTES, 2 MiB by default; a layer's AllGather sends 3.1 MB each way)
# A/B in one invocation: 2 MiB, 1 MiB, 512 KiB, 256 KiB against NCCL, FSDP small under MPS and time-sliced and
# pipeline small under MPS, 3 rounds of 20 steps; and one traced HOCCL run (HOCCL_NET_TRACE: each call's steps in the
# proxy process) at the default. Two TCP nodes of one rank sharing the GPU, CPUs pinned.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
export HOCCL_CACHE_DIR=$OUT/cache TCP_NODES_PIN=1
T0=$(date +%s)
table() { grep -E "^(comm|hoccl|nccl|none)[ +]" "$1" | tail -n "${2:-8}"; }
C=HOCCL_NET_CHUNK_BYTES
V=hoccl,hoccl+$C=1048576,hoccl+$C=524288,hoccl+$C=262144,nccl
TCP_NODES_TIMEOUT=50 timeout 60 env HOCCL_NET_TRACE=$OUT/trace bash scripts/tcp-nodes.sh --mps examples/train_fsdp.py \
  --size small --batch 4 --reduce nccl --comm hoccl --steps 20 --repeats 1 > $OUT/traced.log 2>&1
echo "=== traced rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/traced.log
python3 -m hoccl_runtime.net.trace $OUT/trace 2>&1 | head -60
for m in mps sliced; do
  f=""; [ $m = mps ] && f=--mps
  TCP_NODES_TIMEOUT=150 timeout 160 bash scripts/tcp-nodes.sh $f examples/train_fsdp.py --size small --batch 4 \
    --reduce nccl --comm $V --steps 20 --repeats 3 --json $OUT/fsdp-$m.json > $OUT/fsdp-$m.log 2>&1
  echo "=== fsdp small $m rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/fsdp-$m.log
done
TCP_NODES_TIMEOUT=100 timeout 110 bash scripts/tcp-nodes.sh --mps examples/train_pipeline.py --size small --batch 8 \
  --comm $V --steps 20 --repeats 3 --json $OUT/pipeline-mps.json > $OUT/pipeline-mps.log 2>&1
echo "=== pipeline small mps rc=$? $(( $(date +%s) - T0 )) s"; table $OUT/pipeline-mps.log
cd $OUT && tar czf logs-run2.tgz *.log *.json trace* 2>/dev/null; rm -rf *.log *.json trace* cache
echo "=== total $(( $(date +%s) - T0 )) s"
