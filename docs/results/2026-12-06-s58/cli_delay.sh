#!/usr/bin/env bash
# Session 58, the CPU VM: the 1024-GPU explicit All-to-All through hoccl-compile, the code before shared_delay's one-size
# way (BEFORE: a checkout of it) and today's, alternated, 10 s apart; the plans compared byte for byte.
set -u
BEFORE=${1:?usage: cli_onechunk.sh BEFORE_CHECKOUT}
args="alltoall --topology paper-h800 --nodes 128 --size 1GiB --pattern off"
for i in 1 2 3; do
  for which in before now; do
    dir=$([ $which = before ] && echo "$BEFORE" || echo .)
    ( cd "$dir" && /usr/bin/time -f "$which wall %e user %U sys %S peak_kb %M" python3 -c \
      "from hoccl_compiler.cli import compile_main; compile_main()" $args -o /tmp/onechunk-$which.json >/dev/null ) 2>&1 | tail -n 1
    sleep 10
  done
  cmp /tmp/onechunk-before.json /tmp/onechunk-now.json && echo "plans identical"
done
