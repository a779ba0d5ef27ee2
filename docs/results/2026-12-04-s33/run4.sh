#!/usr/bin/env bash
# Session 33, run 4 on the 1x H200: is pipeline small's host slowed by what else runs on the CPUs? Under MPS, pipeline
# small (profile_pipeline.py part 2): NCCL alone (no hoccl group, no proxy process), then HOCCL beside NCCL, then the
# same with HOCCL_NET_POLL_US=50; per-thread CPU (top -H, 1 s samples) and the host's steal time (/proc/stat) taken
# during each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
(lscpu | head -20; nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null) > $OUT/cpu.txt 2>&1
stat_line() { grep '^cpu ' /proc/stat; }
for v in nccl-alone hoccl-nccl hoccl-nccl-poll50; do
  comm=hoccl,nccl; [ $v = nccl-alone ] && comm=nccl
  poll=10; [ $v = hoccl-nccl-poll50 ] && poll=50
  before=$(stat_line)
  top -H -b -d 1 -n 70 -w 200 > $OUT/top-$v.txt 2>&1 &
  tp=$!
  HOCCL_NET_POLL_US=$poll bash scripts/tcp-nodes.sh --mps examples/profile_pipeline.py --size small --steps 20 \
    --repeats 3 --comm $comm --no-p2p > $OUT/pipe-$v.log 2>&1
  rc=$?
  kill $tp 2>/dev/null; wait $tp 2>/dev/null
  after=$(stat_line)
  echo "=== $v rc=$rc"; grep -E '^(comm|hoccl|nccl) ' $OUT/pipe-$v.log
  python3 - "$before" "$after" <<'PY'
import sys
b = [int(x) for x in sys.argv[1].split()[1:]]; a = [int(x) for x in sys.argv[2].split()[1:]]
d = [y - x for x, y in zip(b, a)]; tot = sum(d[:8])
names = "user nice system idle iowait irq softirq steal".split()
print("cpu %: " + "  ".join(f"{n} {100 * v / tot:.1f}" for n, v in zip(names, d)))
PY
  # the busiest threads over the run: mean %CPU of each (command, thread name) over the samples where it showed
  awk '/^ *[0-9]+ /{key=$1" "$NF; cpu[key]+=$9; n[key]++} END{for(k in cpu) printf "%7.1f %5d %s\n", cpu[k]/70, n[k], k}' \
    $OUT/top-$v.txt | sort -rn | head -14
done
cd $OUT && tar czf logs.tgz *.log top-*.txt cpu.txt && rm -f *.log top-*.txt
