#!/bin/bash
# Session 39, the 2-core CPU VM: old = a worktree of 79d8ad2 at $OLD, new = this checkout (IntColumn tables).
# Interleaved fresh processes: 4 CLI compiles of the 1024-GPU All-to-All each, then 6 load_plan of the same file each.
OLD=${OLD:-/tmp/old}; NEW=${NEW:-$(cd "$(dirname "$0")/../../.." && pwd)}
# interleaved fresh-process pairs: CLI compile of the 1024-GPU All-to-All, then load_plan of its file
for i in 1 2 3 4; do
  for v in old new; do
    root=$NEW; [ $v = old ] && root=$OLD
    /usr/bin/time -f "$v compile %e s wall %U user %S sys %M KB" python3 -c "import sys; sys.path.insert(0,'$root'); from hoccl_compiler.cli import compile_main; sys.exit(compile_main(sys.argv[1:]))" alltoall --topology paper-h800 --nodes 128 --size 1GiB --pattern off -o /tmp/ab_$v.json.gz --quiet > /dev/null 2>/tmp/ab_err_$v.txt; tail -1 /tmp/ab_err_$v.txt
  done
done
for i in 1 2 3 4 5 6; do
  for v in old new; do
    root=$NEW; [ $v = old ] && root=$OLD
    /usr/bin/time -f "$v load-cli %e s wall %U user %S sys %M KB" python3 -c "
import sys, time; sys.path.insert(0,'$root')
from hoccl_compiler.codec import load_plan
t=time.perf_counter(); p=load_plan('/tmp/ab_new.json.gz'); print('$v load_plan in-process %.2f s' % (time.perf_counter()-t))" 2>&1 | tr '\n' ' '; echo
  done
done
