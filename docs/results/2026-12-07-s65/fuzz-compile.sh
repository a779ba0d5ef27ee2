#!/usr/bin/env bash
# Session 65: bad hoccl-compile command lines and bad --matrix / --pairs files; prints each one's exit code, whether a
# traceback reached the user, and the last line of its output. Run from the project root after `pip install -e .`:
#   bash docs/results/2026-12-07-s65/fuzz-compile.sh
set -u
D=$(mktemp -d)
python3 - "$D" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
for name, a in {"neg": -np.ones((16, 16)), "nan": np.full((16, 16), np.nan), "frac": np.full((16, 16), 1.5),
                "shape": np.ones((16, 15)), "3d": np.ones((2, 16, 16)), "big": np.full((16, 16), 2**62, dtype=np.int64),
                "zero": np.zeros((16, 16), dtype=np.int64), "str": np.full((16, 16), "a")}.items():
    np.save(f"{d}/{name}.npy", a)
np.save(f"{d}/obj.npy", np.array([[{}] * 16] * 16, dtype=object), allow_pickle=True)
open(f"{d}/bad.npy", "wb").write(b"\x93NUMPY garbage")
json.dump([[1] * 16] * 15 + [["x"] * 16], open(f"{d}/strs.json", "w"))
json.dump({"a": 1}, open(f"{d}/dict.json", "w"))
json.dump([[1, 2], [3]], open(f"{d}/ragged.json", "w"))
open(f"{d}/bad.csv", "w").write("1,2\n3\n")
open(f"{d}/huge.csv", "w").write("\n".join([",".join(["1e400"] * 16)] * 16))
for name, rows in {"p_neg": [[0, 1, 10], [1, 0, -5]], "p_range": [[0, 99, 10]], "p_self": [[0, 0, 10]],
                   "p_short": [[0, 1]], "p_dup": [[0, 1, 10], [0, 1, 10]], "p_empty": [], "p_frac": [[0.5, 1, 10]]}.items():
    json.dump(rows, open(f"{d}/{name}.json", "w"))
PY
{
  printf '%s\n' "--nodes 0" "--nodes -1" "--nodes 1.5" "--gpus-per-node 0" "--gpus-per-node 3 broadcast" "--dma-queues 0" \
    "--dma-queues 99" "--size 0" "--size -1" "--size 1.5GiB" "--size 1TiB" "--size 3 allgather" "--size 7 alltoall --nodes 1" \
    "--root 99 broadcast" "--root -1 broadcast" "--root 3 scatter --nodes 1" "--matrix /nonexist alltoallv" \
    "--matrix /etc/passwd alltoallv" "--pairs /etc/passwd sendrecv" "--chunk 0" "--chunk -5" "--chunk 1" "--chunk abc" \
    "--net-chunk 0" "--net-chunk 3" "--max-extra-time -1" "--max-extra-time nan" "--max-extra-time inf" \
    "--topology /etc/passwd" "--topology nonexist" "--in-place alltoall" "--in-place scatter" "--dump-after nope" \
    "--pattern on broadcast" "--pattern on alltoall --nodes 1 --size 1KiB" "--encoding compact --size 0" \
    "gather --in-place --root 2" "--size 1 broadcast --nodes 4" "--forwarding none --nodes 4 allgather --size 1MiB" \
    "--transport verbs --topology dgx-h100" "--nodes 100000 --pattern on" "--gpus-per-node 100000" "matrix" "alltoallv" \
    "--size 1e9" "--size 0x10" "--size ''"
  for f in neg nan frac shape 3d obj big zero str bad; do echo "--matrix $D/$f.npy alltoallv"; done
  for f in strs dict ragged; do echo "--matrix $D/$f.json alltoallv"; done
  for f in bad huge; do echo "--matrix $D/$f.csv matrix"; done
  for f in p_neg p_range p_self p_short p_dup p_empty p_frac; do echo "--pairs $D/$f.json sendrecv"; done
} | while IFS= read -r a; do
  out=$(timeout 60 bash -c "hoccl-compile $a -q -o $D/p.json" 2>&1); rc=$?
  printf "rc=%s traceback=%s | %s | %s\n" "$rc" "$(echo "$out" | grep -c Traceback)" "$a" "$(echo "$out" | tail -1 | cut -c1-150)"
done
rm -rf "$D"
