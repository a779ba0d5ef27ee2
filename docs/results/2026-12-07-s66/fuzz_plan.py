"""Session 66: tampered plan files against `hoccl-inspect --verify --simulate`, in process.

    python docs/results/2026-12-07-s66/fuzz_plan.py [--cases 600] [--seed 66] [--out DIR]

Compiles a few plans (an explicit multicast AllGather, a full-encoding Broadcast across nodes, a compact All-to-All,
a one-node Broadcast), then writes mutated copies: a JSON value replaced by one of another type or out of range, an
integer moved by one, a list cut short, emptied, with an element dropped, doubled or two swapped, a key dropped or an
unknown one added, or the raw text cut or a byte changed. Each goes through `inspect_main`. What counts as a defect:
exit 1 (an internal error), an exception out of the CLI, more than the per-case alarm (a hang), and a changed
schedule the verifier accepts whose replayed bytes the reference replay of the original disagrees with (below).

A mutation the verifier accepts (exit 0) is then replayed by the compiler's reference executor
(`hoccl_compiler.verify.replay`) on random inputs and its outputs compared with the original plan's, so an accepted
tamper that would deliver other bytes shows as WRONG, and one that leaves every output the same as "same bytes"."""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import io
import json
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from hoccl_compiler.cli import inspect_main  # noqa: E402
from hoccl_compiler.codec import load_plan  # noqa: E402
from hoccl_compiler.verify import replay  # noqa: E402

PLANS = {
    "ag-mc": ["allgather", "--topology", "paper-h800", "--nodes", "2", "--size", "64MiB", "--encoding", "full"],
    "bc-full": ["broadcast", "--topology", "dgx-h100", "--nodes", "2", "--size", "16MiB", "--encoding", "full"],
    "a2a-compact": ["alltoall", "--topology", "h200x2", "--nodes", "2", "--size", "8MiB", "--encoding", "compact"],
    "bc-1node": ["broadcast", "--topology", "dgx-h100", "--nodes", "1", "--size", "8MiB", "--root", "3"],
}
ODD = [0, -1, 1, 7, 2**31, 2**63, 2**64, 1e308, -0.5, "x", "", True, None, [], {}, [0], {"a": 1}]


class Alarm(Exception):
    pass


def leaves(x, path=()):
    """Every (path, value) of the tree, lists and dicts included."""
    yield path, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, (*path, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, (*path, i))


def set_at(tree, path, value):
    node = tree
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def mutate(doc: dict, rng: random.Random) -> tuple[dict | str, str]:
    """One mutation of a plan's JSON: (new document or raw text, what was done)."""
    kind = rng.choice(["value", "value", "int", "int", "list", "list", "key", "raw"])
    if kind == "raw":
        text = json.dumps(doc)
        if rng.random() < 0.5:
            at = rng.randrange(len(text))
            return text[:at], f"raw: cut at {at} of {len(text)}"
        at = rng.randrange(len(text))
        return text[:at] + rng.choice("0123456789-,{}[]\":a ") + text[at + 1:], f"raw: char {at} changed"
    new = copy.deepcopy(doc)
    paths = [(p, v) for p, v in leaves(new) if p]
    if kind == "value":
        p, v = rng.choice(paths)
        odd = rng.choice(ODD)
        set_at(new, p, copy.deepcopy(odd))
        return new, f"value {'.'.join(map(str, p))}: {str(v)[:40]!r} -> {odd!r}"
    if kind == "int":
        ints = [(p, v) for p, v in paths if isinstance(v, int) and not isinstance(v, bool)]
        p, v = rng.choice(ints)
        d = rng.choice([-1, 1, 2, -2])
        set_at(new, p, v + d)
        return new, f"int {'.'.join(map(str, p))}: {v} -> {v + d}"
    if kind == "list":
        lists = [(p, v) for p, v in paths if isinstance(v, list) and v]
        p, v = rng.choice(lists)
        op = rng.choice(["cut", "empty", "drop", "double", "swap"])
        v2 = list(v)
        i = rng.randrange(len(v2))
        if op == "cut":
            v2 = v2[:-1]
        elif op == "empty":
            v2 = []
        elif op == "drop":
            del v2[i]
        elif op == "double":
            v2.insert(i, copy.deepcopy(v2[i]))
        else:
            j = rng.randrange(len(v2))
            v2[i], v2[j] = v2[j], v2[i]
        set_at(new, p, v2)
        return new, f"list {'.'.join(map(str, p))} ({len(v)}): {op} at {i}"
    dicts = [(p, v) for p, v in paths if isinstance(v, dict) and v]
    p, v = rng.choice(dicts) if rng.random() < 0.8 else ((), new)
    if rng.random() < 0.6:
        k = rng.choice(list(v))
        del v[k]
        return new, f"key {'.'.join(map(str, (*p, k)))} dropped"
    v["unknown_field"] = 1
    return new, f"key {'.'.join(map(str, (*p, 'unknown_field')))} added"


def outputs_of(plan, seed: int) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)
    inputs = [gen.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    return replay(plan, inputs).outputs


def run_inspect(path: Path, timeout_s: int) -> tuple[int | str, str]:
    err = io.StringIO()

    def ring(*_):
        raise Alarm

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = inspect_main(["--verify", "--simulate", str(path)])
    except Alarm:
        rc = "HANG"
    except BaseException as exc:  # noqa: BLE001 - anything out of the CLI is a finding
        rc = f"ESCAPED {type(exc).__name__}: {exc}"[:300]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, err.getvalue().strip().splitlines()[-1][:300] if err.getvalue().strip() else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=66)
    ap.add_argument("--out", default="/tmp/fuzz-plan")
    ap.add_argument("--timeout", type=int, default=60)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, hard))  # a file that claims a huge plan: MemoryError, not swap
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    docs, ref = {}, {}
    for name, args in PLANS.items():
        f = out / f"{name}.json"
        subprocess.run(["hoccl-compile", *args, "-o", str(f), "-q"], check=True)
        docs[name] = json.loads(f.read_text())
        plan = load_plan(f)
        ref[name] = outputs_of(plan, 1)
    tally = collections.Counter()
    findings = []
    t0 = time.time()
    for case in range(a.cases):
        name = rng.choice(list(PLANS))
        new, what = mutate(docs[name], rng)
        f = out / "case.json"
        f.write_text(new if isinstance(new, str) else json.dumps(new))
        rc, msg = run_inspect(f, a.timeout)
        verdict = rc
        if rc == 0:
            try:
                plan = load_plan(f)
                same = len(plan.ranks.output_bytes) == len(ref[name]) and all(
                    np.array_equal(x, y) for x, y in zip(outputs_of(plan, 1), ref[name], strict=True))
                verdict = "accepted, same bytes" if same else "accepted, WRONG bytes"
            except Exception as exc:  # noqa: BLE001
                verdict = f"accepted, replay failed: {type(exc).__name__}: {exc}"[:200]
        key = verdict if isinstance(verdict, str) else f"exit {verdict}"
        tally[key.split(":")[0]] += 1
        line = f"{case:4d} {name:12s} {key:28.28s} | {what} | {msg}"
        if key not in ("exit 2", "accepted, same bytes"):
            findings.append(line)
            (out / f"finding-{case}.json").write_text(f.read_text())
        print(line, flush=True)
    print(f"\n{a.cases} cases in {time.time() - t0:.0f} s:")
    for k, n in tally.most_common():
        print(f"  {n:5d}  {k}")
    print(f"findings ({len(findings)}):")
    for line in findings:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
