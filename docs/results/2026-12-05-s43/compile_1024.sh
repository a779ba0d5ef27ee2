#!/usr/bin/env bash
# Session 43, the CPU VM (2 cores, Firecracker): why the 1024-GPU explicit All-to-All's CLI compile took 17-38 s wall
# with ~9.5 s of user time. Each run: wall, user, system time and minor faults. "cold": as the VM came (guest pages
# never touched since the VM was forked from its snapshot); "warm": after one process touched 18 GiB once and exited.
set -u
export PYTHONPATH=${PYTHONPATH:-$(pwd)}
F="%e s wall  %U user  %S sys  %M KB peak  %R minor faults"
plan=/tmp/a2a1024.json
compile() { /usr/bin/time -f "$1 compile: $F" python3 -c "import sys; from hoccl_compiler.cli import compile_main
sys.argv = ['hoccl-compile', 'alltoall', '--topology', 'paper-h800', '--nodes', '128', '--size', '1GiB', '--pattern',
            'off', '-o', '$plan']; sys.exit(compile_main())" 2>&1 | tail -1; }
inspect() { /usr/bin/time -f "$1 inspect: $F" python3 -c "import sys; from hoccl_compiler.cli import inspect_main
sys.argv = ['hoccl-inspect', '$plan']; sys.exit(inspect_main())" 2>&1 >/dev/null | tail -1; }
[ "${1:-}" = cold ] && { compile cold; compile cold; inspect cold; }
python3 -c "import numpy as np; a = np.ones(18 * 2**30 // 8); print('touched', a.nbytes >> 30, 'GiB')"
for i in 1 2 3; do compile warm; done
for i in 1 2 3; do inspect warm; done
