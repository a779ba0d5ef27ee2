"""Session 67: random hoccl-compile command lines (good and bad values of every option, matrix and pairs files good,
short, negative, non-numeric, empty), run in process; lists every one that ends in an internal error (exit 1) or a
Python exception escaping the CLI, then a count by exit code (SHOW_ERR=1: first every distinct refusal message).  python fuzz_compile.py [N] [SEED]"""
import contextlib
import io
import json
import os
import random
import sys
import tempfile

from hoccl_compiler.cli import compile_main

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 67)
tmp = tempfile.mkdtemp()


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def matrix(G, bad=None):
    m = [[0 if i == j else rng.choice([0, 1, 4096, 1 << 20]) for j in range(G)] for i in range(G)]
    if bad == "short":
        m = m[:-1]
    elif bad == "neg":
        m[0][1] = -5
    elif bad == "str":
        m[0][1] = "x"
    elif bad == "float":
        m[0][1] = 1.5
    elif bad == "ragged":
        m[1] = m[1][:-1]
    elif bad == "huge":
        m[0][1] = 1 << 70
    return m


FILES = {}
for G in (2, 4, 8, 16):
    for bad in (None, "short", "neg", "str", "float", "ragged", "huge"):
        FILES[f"m{G}{bad}"] = write(f"m{G}-{bad}.json", json.dumps(matrix(G, bad)))
    FILES[f"csv{G}"] = write(f"m{G}.csv", "\n".join(",".join(map(str, r)) for r in matrix(G)))
FILES["empty"] = write("empty.json", "")
FILES["notjson"] = write("bad.json", "{[")
FILES["obj"] = write("obj.json", '{"a": 1}')
FILES["pairs"] = write("pairs.json", json.dumps([[0, 1, 4096], [1, 0, 1 << 20]]))
FILES["pairs_bad"] = write("pairs_bad.json", json.dumps([[0, 99, 4096]]))
FILES["pairs_neg"] = write("pairs_neg.json", json.dumps([[0, 1, -1]]))
FILES["pairs_self"] = write("pairs_self.json", json.dumps([[1, 1, 10]]))
FILES["pairs_short"] = write("pairs_short.json", json.dumps([[0, 1]]))
FILES["topo_bad"] = write("topo.json", '{"name": "x", "gpus_per_node": -1}')
FILES["missing"] = os.path.join(tmp, "nope.json")
FILES["dir"] = tmp

KINDS = ["alltoall", "allgather", "broadcast", "scatter", "gather", "alltoallv", "matrix", "sendrecv", "allreduce",
         "reduce_scatter", "bogus", "ALL-GATHER"]
SIZES = ["1MiB", "0", "1", "3", "64KiB", "1GiB", "-1", "x", "1.5MiB", "1e3", "100TiB", "1KB", "", "inf", "nan"]
OPTS = {
    "--topology": ["paper-h800", "dgx-h100", "h200x2", "nope", FILES["topo_bad"], FILES["missing"], FILES["dir"]],
    "--nodes": ["1", "2", "0", "-1", "x", "3", "100000"],
    "--gpus-per-node": ["1", "2", "4", "8", "0", "-2", "9", "x"],
    "--forwarding": ["symmetric", "none", "x"],
    "--dma-queues": ["1", "2", "0", "-1", "9", "x"],
    "--transport": ["tcp", "verbs", "x"],
    "--size": SIZES,
    "--root": ["0", "1", "-1", "7", "99", "x"],
    "--matrix": list(FILES.values()),
    "--pairs": [FILES[k] for k in ("pairs", "pairs_bad", "pairs_neg", "pairs_self", "pairs_short", "empty",
                                   "missing", "notjson")],
    "--chunk": ["auto", "4MiB", "0", "-1", "1", "x", "1TiB", "3"],
    "--net-chunk": ["auto", "off", "1MiB", "0", "x", "-5", "1"],
    "--pattern": ["auto", "on", "off", "x"],
    "--encoding": ["auto", "full", "compact", "x"],
    "--max-extra-time": ["0", "0.01", "-0.1", "2", "nan", "inf", "x"],
    "--multicast": ["on", "off", "x"],
    "--dump-after": ["expand", "stages", "verify", "x"],
}
FLAGS = ["--in-place", "--no-baselines", "-q", "-v"]
codes, bad, msgs = {}, [], {}
for i in range(N):
    argv = [rng.choice(KINDS)]
    for opt in rng.sample(sorted(OPTS), rng.randint(0, 6)):
        argv += [opt, rng.choice(OPTS[opt])]
    if "--nodes" not in argv or rng.random() < 0.7:  # keep most compiles small
        argv += ["--nodes", rng.choice(["1", "2"])]
    argv += rng.sample(FLAGS, rng.randint(0, 2))
    argv += ["-o", os.path.join(tmp, f"p{i % 7}.json")]
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = compile_main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    except BaseException as exc:  # noqa: BLE001 - what escapes the CLI is what this looks for
        rc = f"escaped {type(exc).__name__}: {exc}"
    codes[rc if isinstance(rc, int) else "escaped"] = codes.get(rc if isinstance(rc, int) else "escaped", 0) + 1
    if os.environ.get("SHOW_OK") and rc == 0:
        print("ok", " ".join(a.replace(tmp, "$TMP") for a in argv))
    if os.environ.get("SHOW_ERR") and rc == 2:
        msgs.setdefault(err.getvalue().strip().splitlines()[-1][:150].replace(tmp, "$TMP"), argv)
    if rc not in (0, 2):
        bad.append((argv, rc, err.getvalue().strip().splitlines()[-1:] if err.getvalue() else ""))
for argv, rc, last in bad:
    print("rc", rc, " ".join(a.replace(tmp, "$TMP") for a in argv), "->", last)
for m in sorted(msgs):
    print("message:", m)
print(f"{N} command lines: exit codes {dict(sorted(codes.items(), key=str))}, {len(bad)} not 0 or 2")
