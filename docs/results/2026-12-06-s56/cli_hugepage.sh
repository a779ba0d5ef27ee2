#!/usr/bin/env bash
# Session 56: the 1024-GPU explicit All-to-All through the CLIs, with NumPy's hugepage advice (NUMPY_MADVISE_HUGEPAGE=1,
# NumPy's default) and without (the CLIs' default since session 56), alternated, 15 s apart; then 1 GiB of np.ones
# with and without the advice. The 2-core CPU VM (transparent_hugepage enabled=madvise, defrag=madvise).
set -u
out=$(mktemp -d)
for i in 1 2; do
  for h in 1 unset; do
    sleep 15
    if [ "$h" = unset ]; then env -u NUMPY_MADVISE_HUGEPAGE /usr/bin/time -f "compile advice=$h wall %e user %U sys %S maxrss_kb %M" \
        hoccl-compile alltoall --topology paper-h800 --nodes 128 --size 1GiB --pattern off -o "$out/p.json" -q >/dev/null
    else NUMPY_MADVISE_HUGEPAGE=$h /usr/bin/time -f "compile advice=$h wall %e user %U sys %S maxrss_kb %M" \
        hoccl-compile alltoall --topology paper-h800 --nodes 128 --size 1GiB --pattern off -o "$out/p.json" -q >/dev/null
    fi
    sleep 5
    if [ "$h" = unset ]; then env -u NUMPY_MADVISE_HUGEPAGE /usr/bin/time -f "inspect advice=$h wall %e user %U sys %S maxrss_kb %M" hoccl-inspect "$out/p.json" >/dev/null
    else NUMPY_MADVISE_HUGEPAGE=$h /usr/bin/time -f "inspect advice=$h wall %e user %U sys %S maxrss_kb %M" hoccl-inspect "$out/p.json" >/dev/null
    fi
  done
done
for h in 1 0; do
  sleep 15
  NUMPY_MADVISE_HUGEPAGE=$h python3 -c "
import time, numpy as np
t = time.perf_counter(); a = np.ones(2**27); print('np.ones 1 GiB advice=$h', round(time.perf_counter() - t, 2), 's')"
done
rm -rf "$out"
