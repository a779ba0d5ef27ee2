#!/usr/bin/env bash
# Session 64: the CLIs on damaged plan files. Compiles a full (AllGather 2x8), a compact (Broadcast 2x8) and a pattern
# (All-to-All 3x8) plan, writes copies with one value replaced at random (-1, 10^12, "x", null, 0.5, [], 2^63, ...;
# then any list entry moved by one or set out of range), and runs hoccl-inspect (plain, --simulate, and --format json
# for some) on each. Prints every run that exits other than 0 or 2 or prints a traceback: on main before session 64's
# fixes, a pattern plan's num_stages and four indices of a full plan (a wait, a role, a GPU) did.
# Run from the project root: bash docs/results/2026-12-07-s64/fuzz.sh
set -u
D=$(mktemp -d); cd "$D"
bad() { timeout 60 "$@" >out 2>err; rc=$?; if { [ $rc -ne 0 ] && [ $rc -ne 2 ]; } || grep -q Traceback err; then
  echo "RC=$rc: $*"; tail -3 err; fi; }
hoccl-compile allgather --nodes 2 --size 1MiB -o ag.json -q
hoccl-compile broadcast --nodes 2 --size 1MiB -o bc.json -q --encoding compact
hoccl-compile alltoall --nodes 3 --size 24MiB --pattern on -o pt.json -q
python3 - <<'PY'
import copy, json, random
def paths(o, p=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from paths(v, p + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o[:3]):
            yield from paths(v, p + (i,))
        if len(o) > 3:
            yield from paths(o[-1], p + (len(o) - 1,))
    else:
        yield p
random.seed(5)
for name, n in (("ag", 60), ("bc", 60), ("pt", 80)):
    base = json.load(open(f"{name}.json"))
    ps = list(paths(base))
    for i in range(n):
        d = copy.deepcopy(base)
        p = random.choice(ps)
        o = d
        for k in p[:-1]:
            o = o[k]
        o[p[-1]] = random.choice([-1, 10**12, "x", None, 0.5, [], 2**63, -2**63 - 1, True, 3, 0])
        json.dump(d, open(f"bad_{name}_{i}.json", "w"))
PY
# second part: a random entry of any list (not only the first three and the last), moved by one or set out of range
random_deep() { python3 - "$@" <<'PY'
import copy, json, random, sys
seed, name, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
random.seed(seed)
def paths(o, p=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from paths(v, p + (k,))
    elif isinstance(o, list):
        for i in (range(len(o)) if len(o) <= 8 else sorted(random.sample(range(len(o)), 8))):
            yield from paths(o[i], p + (i,))
    else:
        yield p
base = json.load(open(f"{name}.json"))
ps = list(paths(base))
for i in range(n):
    d = copy.deepcopy(base)
    p = random.choice(ps)
    o = d
    for k in p[:-1]:
        o = o[k]
    v = o[p[-1]]
    num = isinstance(v, int) and not isinstance(v, bool)
    o[p[-1]] = random.choice([v + 1 if num else -1, v - 1 if num else 0, -1, 0, 10**9, 2**62])
    json.dump(d, open(f"bad_deep_{name}_{seed}_{i}.json", "w"))
PY
}
hoccl-compile allgather --nodes 2 --size 3MiB -o ag3.json -q --encoding full
for seed in 23 29 31; do random_deep $seed ag3 60; random_deep $seed bc 60; done
n=0
for f in bad_*.json; do bad hoccl-inspect "$f"; bad hoccl-inspect "$f" --simulate; n=$((n + 2))
  case $f in bad_pt_*|bad_deep_*) bad hoccl-inspect "$f" --format json; n=$((n + 1));; esac; done
echo "$(ls bad_*.json | wc -l) damaged files, $n runs"
rm -rf "$D"
