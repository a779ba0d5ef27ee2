#!/usr/bin/env bash
# PLANNED, NOT YET RUN: no GPU start succeeded after run 1 in session 43; kept for a later session. Its pipeline 350m
# part ran in session 44's run 1 (--compare 350m); its pipeline small part has not run.
# Run 2 on the 1x H200, CPUs pinned: pipeline small again in both settings (HOCCL as it is, with
# HOCCL_NET_ONE_STREAM=2 the default since run 1; with =0; NCCL), then 1F1B pipelining at 350m in both settings (HOCCL as
# it is, NCCL and no communication). FSDP 350m left out to fit the device time left.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
run() {  # NAME TIMEOUT SCRIPT ARGS...
  local name=$1 to=$2 t0; shift 2; t0=$(date +%s); flag=""; [[ $name == *mps ]] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=$to bash scripts/tcp-nodes.sh $flag "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(comm|hoccl|nccl|none)" $OUT/$name.log | tail -n 6
}
V="hoccl,hoccl+HOCCL_NET_ONE_STREAM=0,nccl"
for mode in sliced mps; do
  run pipe-small-$mode 60 examples/train_pipeline.py --size small --batch 8 --steps 20 --repeats 3 --comm "$V"
done
for mode in sliced mps; do
  run pipe-350m-$mode 75 examples/train_pipeline.py --size 350m --batch 8 --steps 8 --repeats 3 --comm hoccl,nccl,none
done
cd $OUT && tar czf logs-run2.tgz *.log *.json 2>/dev/null; rm -f *.log *.json
