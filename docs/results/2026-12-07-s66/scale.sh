#!/usr/bin/env bash
# Session 66, the CPU VM: issue 35's two compiles above 1024 GPUs (<= 10 min, <= 12 GiB), last measured in session 39,
# rerun on today's compiler: the Zipf(1.1) All-to-Allv on 2048 GPUs (docs/results/2026-12-04-s30/zipf2048.sh) and the
# explicit uniform All-to-All on 2048 GPUs, one run each, /usr/bin/time -v.
set -u
echo "## zipf2048.sh of docs/results/2026-12-04-s30 (Zipf(1.1) All-to-Allv, 2048 GPUs, paper-h800, 1 GiB mean)"
bash docs/results/2026-12-04-s30/zipf2048.sh
echo "## hoccl-compile alltoall --topology paper-h800 --nodes 256 --size 1GiB --pattern off"
/usr/bin/time -v hoccl-compile alltoall --topology paper-h800 --nodes 256 --size 1GiB --pattern off -o /tmp/a2048.json.gz -q \
  2>&1 | grep -E 'Elapsed|Maximum resident|User time|System time'
