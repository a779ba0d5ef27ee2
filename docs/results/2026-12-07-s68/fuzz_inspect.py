"""Session 68: random hoccl-inspect command lines (good and bad values of every option) over good plans (unicast,
multicast, pattern, gzip) and bad files (truncated, empty, not gzip, missing, a folder), run in process; lists every
one that ends in an internal error (exit 1), a traceback or an escaped exception, then a count by exit code.
python fuzz_inspect.py [N] [SEED]"""
import contextlib
import io
import os
import random
import sys
import tempfile

from hoccl_compiler.cli import compile_main, inspect_main

os.chdir(tempfile.mkdtemp())
with contextlib.redirect_stdout(io.StringIO()):
    for argv in (["allgather", "--topology", "dgx-h100", "--nodes", "2", "--size", "1MiB", "-o", "ag.json"],
                 ["alltoall", "--topology", "paper-h800", "--nodes", "2", "--size", "1MiB", "-o", "a2a.json.gz"],
                 ["alltoall", "--topology", "paper-h800", "--nodes", "4", "--size", "1MiB", "--pattern", "on", "-o",
                  "pat.json"],
                 ["broadcast", "--topology", "dgx-h100", "--nodes", "2", "--size", "1MiB", "-o", "bc.json"]):
        assert compile_main([*argv, "-q"]) == 0, argv
with open("ag.json", "rb") as f, open("trunc.json", "wb") as g:
    g.write(f.read(3000))
with open("empty.json", "w") as f:
    f.write("{}")
with open("bad.json.gz", "w") as f:
    f.write("x")
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 68)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 400
plans = ["ag.json", "a2a.json.gz", "pat.json", "bc.json", "trunc.json", "empty.json", "bad.json.gz", "nope.json", "."]
opts = [["--format", "text"], ["--format", "json"], ["--format", "x"], ["--verify"], ["--simulate"],
        ["--chunk-start-us", "5"], ["--chunk-start-us", "-1"], ["--chunk-start-us", "nan"], ["--chunk-start-us", "1e400"],
        ["--stages", "0"], ["--stages", "-3"], ["--stages", "x"], ["--stages", "100000000000000000000"],
        ["--timelines", "0"], ["--timelines", "-1"], ["--timelines", "5"], ["--timelines", "99999999"],
        ["--topology", "dgx-h100"], ["--topology", "paper-h800"], ["--topology", "nope"], ["--topology", "ag.json"],
        ["--nodes", "2"], ["--nodes", "0"], ["--nodes", "-2"], ["--nodes", "4"], ["--gpus-per-node", "8"],
        ["--gpus-per-node", "0"], ["--forwarding", "none"], ["--forwarding", "x"], ["--dma-queues", "2"],
        ["--dma-queues", "0"], ["--transport", "verbs"], ["--transport", "x"], ["--plot", "p.png"]]
codes = {}
bad = 0
for i in range(N):
    argv = [rng.choice(plans)] + [a for o in rng.sample(opts, rng.randint(0, 4)) for a in o]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = inspect_main(argv)
    except SystemExit as e:
        code = e.code
    except BaseException as e:
        code = f"ESCAPED {type(e).__name__}: {e}"
    codes[code] = codes.get(code, 0) + 1
    if code not in (0, 2) or "Traceback" in err.getvalue() or "internal error" in err.getvalue():
        bad += 1
        print("BAD", argv, code, err.getvalue()[-400:])
print(codes, "bad", bad)
