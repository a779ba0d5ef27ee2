#!/usr/bin/env bash
# Session 35, run 3 on the 1x H200: the host (runtime, CPU quota), how long a 10 us poll sleep lasts alone and while
# FSDP small trains beside it, and FSDP small (NCCL reducing, MPS) with the proxy's trace split into its loop's
# longest poll sleep and longest turn per call (stalls.py).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/results/2026-12-04-s35
uname -a; cat /sys/fs/cgroup/cpu.max 2>/dev/null; nproc; dmesg 2>/dev/null | head -2
python3 $D/sleepprobe.py 2; python3 $D/sleepprobe.py 2 threads
export TCP_NODES_TIMEOUT=180
(sleep 25; python3 $D/sleepprobe.py 5 threads) &
HOCCL_NET_TRACE=$OUT/fsdp bash scripts/tcp-nodes.sh --mps $D/gcwrap.py examples/train_fsdp.py --size small --batch 4 \
  --steps 20 --repeats 3 --comm hoccl,nccl --reduce nccl --json $OUT/fsdp-mps.json > $OUT/fsdp-mps.log 2>&1
echo "=== fsdp small mps rc=$?"; grep -E "^(comm|hoccl|nccl|none)[ +]" $OUT/fsdp-mps.log | tail -n 12
wait
python3 $D/stalls.py $OUT/fsdp
cd $OUT && tar czf logs-run3.tgz *.log *.json *.csv && rm -f *.log *.json *.csv
