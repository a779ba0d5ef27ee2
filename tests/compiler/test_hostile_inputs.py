"""Bad and hostile inputs: every one gets exit 2 (a CLI) or a HocclError subclass (the library), one line, never
another exception, never a hang. Fuzzed with hypothesis in bounded time: mutated real plans into the loader and
the verifier, a hostile peer's bytes into the TCP handshake, random command lines into hoccl-compile."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.cli import compile_main, inspect_main
from hoccl_compiler.codec import plan_from_json
from hoccl_compiler.errors import HocclError, PlanError
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime import _trust
from hoccl_runtime.net.transport.tcp import HELLO, TcpTransport

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _one_error_line(code, err, prog="hoccl-compile"):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "internal error" not in err, err


@pytest.mark.parametrize("argv,text", [
    (["alltoall", "--size", "99999999999999999999999"], "larger than 1 EiB"),
    (["alltoall", "--topology", "h200x2", "--nodes", "1", "--size", "1GiB", "--chunk", "1"], "over the 67,108,864"),
    (["broadcast", "--root", "-1", "--size", "1MiB"], "root -1 is out of range for 16 ranks; pick --root in 0..15"),
    (["alltoall", "--size", "inf"], "cannot read size"),
    (["alltoall", "--size", "1e30"], "cannot read size"),
    (["alltoall", "--size", "2000000TiB"], "larger than 1 EiB"),
])
def test_compile_refuses_with_one_line(argv, text, capsys, tmp_cwd):
    code = compile_main(argv)
    _, err = capsys.readouterr()
    _one_error_line(code, err)
    assert text in err


@pytest.mark.parametrize("name,content,text", [
    ("inf.json", '{"name": "x", "nodes": 1, "gpus_per_node": 2, "nvlink_gbps": Infinity, "nic_gbps": 1}',
     "finite number"),
    ("bool.json", '{"name": "x", "nodes": true, "gpus_per_node": 2, "nvlink_gbps": 1, "nic_gbps": 1}',
     "nodes: Input should be a valid integer"),
    ("deep.json", "[" * 50_000 + "]" * 50_000, "nests too deeply"),
], ids=["inf", "bool", "deep"])
def test_topology_files_refused_with_one_line(name, content, text, capsys, tmp_path):
    path = tmp_path / name
    path.write_text(content)
    code = compile_main(["alltoall", "--topology", str(path), "--size", "1MiB", "-o", str(tmp_path / "p.json")])
    _, err = capsys.readouterr()
    _one_error_line(code, err)
    assert text in err


@pytest.mark.parametrize("kind,name,content,text", [
    ("sendrecv", "pairs.json", "[]", "has no pairs"),
    ("sendrecv", "frac.json", "[[0.5, 1, 100]]", "not a whole rank number"),
    ("sendrecv", "bool.json", "[[true, 1, 100]]", "is a boolean"),
    ("sendrecv", "obj.json", '{"a": 1}', "a list of [src, dst, bytes] rows"),
    ("alltoallv", "ragged.json", "[[0, 1], [2]]", "row 1 has 1 entries and row 0 has 2"),
    ("alltoallv", "huge.json", "[[0, 1e30], [2, 0]]", "over 1 EiB"),
    ("alltoallv", "text.json", '[[0, "1j"], [2, 0]]', 'entry [0][1] is "1j"'),
    ("alltoallv", "deep.json", "[" * 50_000 + "]" * 50_000, "cannot read matrix file"),
    ("alltoallv", "dict.json", '[[{"real": 1}, 2], [3, 4]]', "entry [0][0] is {"),  # was an internal error
    ("alltoallv", "boolm.json", "[[true, 1], [1, 0]]", "entry [0][0] is true"),
    ("alltoallv", "notrows.json", '{"a": 1}', "a list of rows"),
], ids=["empty", "fractional", "bool", "object", "ragged", "huge", "text", "deep", "dict", "bool-matrix", "not-rows"])
def test_input_files_refused_with_one_line(kind, name, content, text, capsys, tmp_path):
    path = tmp_path / name
    path.write_text(content)
    flag = "--pairs" if kind == "sendrecv" else "--matrix"
    code = compile_main([kind, "--topology", "h200x2", "--nodes", "1", flag, str(path), "-o", str(tmp_path / "p.json")])
    _, err = capsys.readouterr()
    _one_error_line(code, err)
    assert text in err


def test_a_complex_npy_matrix_is_refused(capsys, tmp_path):
    path = tmp_path / "c.npy"
    np.save(path, np.array([[0, 1 + 1j], [2, 0]]))
    code = compile_main(["alltoallv", "--topology", "h200x2", "--nodes", "1", "--matrix", str(path)])
    _, err = capsys.readouterr()
    _one_error_line(code, err)
    assert "complex128" in err


def test_dump_after_never_follows_a_planted_symlink(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "a.json"
    (tmp_path / ".a.json.stages.json.tmp").symlink_to(victim)  # the old predictable temp name
    code = compile_main(["alltoall", "--topology", "h200x2", "--nodes", "1", "--size", "1MiB", "--dump-after",
                         "stages", "-o", str(out)])
    capsys.readouterr()
    assert code == 0 and victim.read_text() == "keep me" and (tmp_path / "a.json.stages.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".a.json.stages.json.") and p.name !=
                ".a.json.stages.json.tmp"]  # no temporary left behind


# --- fuzzing ------------------------------------------------------------------------------------------------
_PLAN = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="alltoall", size_bytes=6000),
                     CompileOptions(chunk_bytes=1024, baselines=False))
_TEXT = _PLAN.model_dump_json()


@FUZZ
@given(st.data())
def test_mutated_plans_are_valid_or_refused(data):
    """Single-digit edits, deletions and insertions of a real plan's JSON: load + verify either pass or raise a
    HocclError subclass (a PlanError from the runtime's check)."""
    text = _TEXT
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text) - 1))
        how = data.draw(st.sampled_from(["digit", "delete", "insert"]))
        if how == "digit":
            text = text[:i] + data.draw(st.sampled_from("0123456789-")) + text[i + 1:]
        elif how == "delete":
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i] + data.draw(st.sampled_from(['9', '"', ",", "[", "]", "{", "}", "1e9", "null"])) + text[i:]
    try:
        plan = plan_from_json(text)
        _trust.trusted(plan)
    except HocclError:
        pass


def _leaves(obj, path=()):
    """Every path into a JSON value (dict keys and list indices), the value itself first."""
    yield path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from _leaves(value, (*path, key))


def _encodings() -> dict[str, dict]:
    from hoccl_compiler.compact import to_compact
    from hoccl_compiler.pattern import compile_pattern

    pattern = compile_pattern(make_topology("paper-h800", nodes=3),
                              CollectiveSpec(kind="alltoall", size_bytes=24 << 10))
    return {"full": json.loads(_TEXT), "compact": json.loads(json.dumps(to_compact(_PLAN))),
            "pattern": json.loads(pattern.model_dump_json())}


_ENCODED = _encodings()
_HOSTILE_VALUES = [None, -1, 0, 3, 1.5, 1e308, "x", [], {}, True, 2**63, -(2**63) - 1, 2**64 - 1, 2**70]


@contextlib.contextmanager
def memory_bound(extra_gib: float):
    """The process's address space capped at what it maps now plus ``extra_gib`` (RLIMIT_AS, soft limit only, put
    back after): a decoder that tries to build what a hostile header claims gets a MemoryError, which fails the
    test, instead of the machine's memory."""
    import resource

    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + int(extra_gib * (1 << 30))
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_HEADER_INTS = [2**31, 2**40, 65536, 16384, 4096 * 64, 10**12]


@settings(max_examples=60, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_compact_and_pattern_headers_stay_in_memory_and_time(data, monkeypatch):
    """A compact or pattern plan whose header claims a huge collective (nodes, GPUs per node, sizes, stage counts set
    to large integers, several at once): load + verify end in a valid plan or a HocclError within 10 s each, and
    the address space stays within 3 GiB of what the process maps (HOCCL_MAX_PLAN_MEMORY at 1 GiB)."""
    from hoccl_compiler import verify_plan

    monkeypatch.setenv("HOCCL_MAX_PLAN_MEMORY", str(1 << 30))
    encoding = data.draw(st.sampled_from(["compact", "pattern"]))
    doc = json.loads(json.dumps(_ENCODED[encoding]))
    ints = [p for p in _leaves(doc) if p and isinstance(_at(doc, p), int) and not isinstance(_at(doc, p), bool)
            and len(p) <= 3]
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(ints))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            _set(doc, path, data.draw(st.sampled_from(_HEADER_INTS)))
    text = json.dumps(doc)
    with memory_bound(3.0), contextlib.suppress(HocclError):
        plan = plan_from_json(text)
        if encoding == "compact":
            verify_plan(plan)


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _set(doc, path, value):
    _at(doc, path[:-1])[path[-1]] = value


@FUZZ
@given(st.data())
def test_plans_with_hostile_values_are_valid_or_refused(data):
    """Any field of a full, compact or pattern plan set to a hostile value (wrong type, an empty container, an
    integer beyond 64 bits): load + verify either pass or raise a HocclError, as hoccl-inspect --verify needs (it
    found an OverflowError in the verifier and an AttributeError in the compact reader)."""
    from hoccl_compiler import verify_plan

    encoding = data.draw(st.sampled_from(sorted(_ENCODED)))
    doc = json.loads(json.dumps(_ENCODED[encoding]))
    paths = [p for p in _leaves(doc) if p]
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from(paths))
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            # a copy: a later edit may write into a drawn container, which must not change the shared list
            target[path[-1]] = copy.deepcopy(data.draw(st.sampled_from(_HOSTILE_VALUES)))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit replaced a container on this path
    with contextlib.suppress(HocclError):
        verify_plan(plan_from_json(json.dumps(doc)))


@pytest.mark.parametrize("encoding", sorted(_ENCODED))
@pytest.mark.parametrize("transport", [[], {}, ["tcp"]])
def test_a_transport_that_is_not_a_name_is_refused_as_bad_input(encoding, transport):
    """A plan whose topology.transport is a list or a dict is refused with a HocclError naming the field (the fuzz
    test above found a TypeError: the transport's cost lookup hashed the value before the field was validated)."""
    from hoccl_compiler import verify_plan

    doc = json.loads(json.dumps(_ENCODED[encoding]))
    doc["topology"]["transport"] = transport
    with pytest.raises(HocclError, match="transport"):
        verify_plan(plan_from_json(json.dumps(doc)))


@contextlib.contextmanager
def _the_real_peer_gets_in(hello_timeout_s: float, within_s: float):
    """A listening transport (handshakes bounded by ``hello_timeout_s``) with an accept waiting: the body opens its
    hostile sockets at the (host, port) given; then the real peer connects, and it must be the one accepted, within
    ``within_s``."""
    import hoccl_runtime.net.transport.tcp as tcp

    old = tcp.HELLO_TIMEOUT_S
    tcp.HELLO_TIMEOUT_S = hello_timeout_s
    secret = os.urandom(32)
    rx = TcpTransport(lanes=1, session="job", secret=secret)
    try:
        address = rx.listen()
        host, port = address.split(":")
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("conn", rx.accept(timeout_s=20)), daemon=True)
        t.start()
        yield host, int(port)
        tx = TcpTransport(lanes=1, session="job", secret=secret, name="real")
        t0 = time.monotonic()
        tx.connect(address, timeout_s=15)
        t.join(20)
        assert box.get("conn") is not None and box["conn"].peer_name == "real"
        assert time.monotonic() - t0 < within_s
        tx.close()
    finally:
        tcp.HELLO_TIMEOUT_S = old
        rx.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=160), min_size=1, max_size=4))
def test_a_hostile_peers_bytes_never_break_the_handshake(strays):
    """Arbitrary bytes on fresh connections before the real peer: each is dropped, the real peer gets in."""
    with _the_real_peer_gets_in(0.3, within_s=15) as (host, port):
        for raw in strays:
            with socket.create_connection((host, port), timeout=5) as c:
                c.sendall(raw)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, HELLO.size + 8), st.sampled_from(["stall", "half-close", "drip"])),
                min_size=1, max_size=6))
def test_slow_and_half_open_peers_never_hold_up_the_real_one(peers):
    """Peers that send part of a hello (or a few bytes more) and then stall, close their write side, or drip one
    byte at a time, all at once beside the real peer: the real peer is accepted within the whole-handshake deadline
    plus its own connect, each hostile socket is dropped, and nothing raises but a HocclError."""
    socks, stop = [], threading.Event()
    try:
        with _the_real_peer_gets_in(0.5, within_s=10) as (host, port):
            junk = os.urandom(HELLO.size + 8)
            for n, how in peers:
                c = socket.create_connection((host, port), timeout=5)
                socks.append(c)
                if how == "drip":
                    threading.Thread(target=_drip, args=(c, junk[:max(n, 1)], stop), daemon=True).start()
                    continue
                # the server may drop a hostile socket before its client is through with it (a junk hello is
                # refused as soon as it is read): the client's own send or shutdown then fails, which is not the
                # server's failure (seen once in CI: ENOTCONN on shutdown)
                with contextlib.suppress(OSError):
                    c.sendall(junk[:n])
                    if how == "half-close":
                        c.shutdown(socket.SHUT_WR)
    finally:
        stop.set()
        for c in socks:
            c.close()


def _drip(c: socket.socket, raw: bytes, stop: threading.Event) -> None:
    for b in raw:
        if stop.wait(0.05):
            return
        with contextlib.suppress(OSError):
            c.sendall(bytes([b]))


_TOKENS = ["alltoall", "allgather", "broadcast", "sendrecv", "alltoallv", "allreduce", "--size", "--nodes",
           "--root", "--chunk", "--topology", "--gpus-per-node", "--dma-queues", "--max-extra-time", "--in-place",
           "--forwarding", "1MiB", "0", "-1", "3", "1.5", "true", "none", "h200x2", "dgx-h100", "nope", "1e999",
           "99999999999999999999", "64KiB", "--dump-after", "stages", "--no-baselines"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(_TOKENS), max_size=7))
def test_random_command_lines_exit_0_or_2(argv, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("cli") / "p.json"
    code = compile_main([*argv, "-o", str(out), "-q"])
    _, err = capsys.readouterr()
    assert code in (0, 2), (argv, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if code == 0:
        code = inspect_main([str(out), "--format", "json"])
        got, err = capsys.readouterr()
        assert code == 0 and json.loads(got), err


@pytest.mark.parametrize("value", [0, "x", [[1, 2]], {"a": 1}])
def test_a_compact_stage_whose_chunk_order_is_not_a_list_is_refused(value):
    """Found by the fuzz above: a compact stage's ``chunks`` set to a number reached np.concatenate (ValueError)."""
    doc = json.loads(json.dumps(_ENCODED["compact"]))
    doc["stages"][0]["chunks"] = value
    with pytest.raises(PlanError):
        plan_from_json(json.dumps(doc))


def test_a_ragged_hoccl_matrix_and_a_nan_stage_time_are_plan_errors():
    """A ragged hoccl_matrix reached np.asarray in verify_plan (ValueError), a compact stage's NaN time the
    Stage model (a pydantic ValidationError): both are PlanErrors now, as hoccl-inspect --verify needs."""
    from hoccl_compiler import verify_plan

    doc = json.loads(_TEXT)
    doc["hoccl_matrix"][0] = doc["hoccl_matrix"][0][:-1]
    with pytest.raises(PlanError, match="hoccl_matrix"):
        verify_plan(plan_from_json(json.dumps(doc)))
    compact = json.loads(json.dumps(_ENCODED["compact"]))
    compact["stages"][0]["time_s"] = float("nan")
    with pytest.raises(PlanError, match="time_s is nan"):
        plan_from_json(json.dumps(compact))


def _edited(edit) -> dict:
    doc = json.loads(_TEXT)
    edit(doc)
    return doc


@pytest.mark.parametrize("edit,text", [
    # the report's breakdown reached hoccl-inspect's summary, which took a missing part for an internal error
    (lambda d: d["report"]["breakdown_s"].pop("call_s"), r"breakdown_s must hold .* it lacks \['call_s'\]"),
    (lambda d: d["report"]["breakdown_s"].update(stage_sync_s=-1.0), r"breakdown_s\['stage_sync_s'\] is -1.0"),
    (lambda d: d["report"]["breakdown_s"].update(extra_s=1.0), r"it lacks \[\] and has \['extra_s'\]"),
    # a queue table that is not the topology's: the runtime takes a queue's stream from its GPU, kind and index
    (lambda d: d["queues"]["gpu"].__setitem__(-1, 0), r"queue \d+ is nic 0 of GPU 0, where .* has nic 0 of GPU 1"),
    (lambda d: d["queues"]["index"].__setitem__(0, -1), r"queue 0 is dma -1 of GPU 0, where .* has dma 0 of GPU 0"),
    (lambda d: d["queues"]["kind"].__setitem__(1, "dma"), r"queue 1 is dma 0 of GPU 0, where .* dma_local 0"),
    (lambda d: [d["queues"][k].pop() for k in ("gpu", "kind", "index")], r"7 queues where 2 GPUs of 1 DMA"),
    # an edited input without its id: the id no longer names the plan's inputs
    (lambda d: d["topology"].update(nvlink_gbps=1.0), r"its plan_id '[0-9a-f]{16}' is not the id of its topology"),
    (lambda d: d["collective"].update(size_bytes=6002), r"plan_id .* is not the id"),
])
def test_tampered_reports_queue_tables_and_ids_are_refused_by_name(edit, text, tmp_path, capsys):
    """Found by session 66's fuzzing of hoccl-inspect (docs/results/2026-12-07-s66/fuzz_plan.py): each of these
    passed the loader and the verifier, or ended in an internal error; now one line that names the field."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_edited(edit)))
    code = inspect_main(["--verify", str(path)])
    _one_error_line(code, capsys.readouterr().err, prog="hoccl-inspect")
    with pytest.raises(PlanError, match=text):
        from hoccl_compiler import verify_plan

        verify_plan(plan_from_json(path.read_text()))


@pytest.mark.parametrize("where", ["top", "stage", "segments"])
def test_a_compact_file_with_a_field_it_does_not_hold_is_refused(where):
    """As the full encoding's schema forbids extra fields, the compact reader refuses keys it does not read (it
    ignored them before session 66's fuzzing)."""
    doc = json.loads(json.dumps(_ENCODED["compact"]))
    plan_from_json(json.dumps(doc))  # as written: read
    target = {"top": doc, "stage": doc["stages"][0], "segments": doc["stages"][0]["segments"]}[where]
    target["extra"] = 1
    with pytest.raises(PlanError, match=r"has \['extra'\], which the compact encoding does not hold"):
        plan_from_json(json.dumps(doc))


@pytest.mark.parametrize("argv,text", [
    (["--stages", "-1"], "--stages -1: give a number of rows >= 0"),
    (["--timelines", "-5"], "--timelines -5"),
    (["--chunk-start-us", "1"], "--chunk-start-us applies to --simulate"),
    (["--simulate", "--chunk-start-us", "inf"], "--chunk-start-us inf must be a finite time >= 0"),
    (["--simulate", "--chunk-start-us", "nan"], "--chunk-start-us nan"),
    (["--nodes", "3"], "--nodes describes the topology to check the plan against: give --topology too"),
    (["--dma-queues", "2", "--transport", "tcp"], "--dma-queues, --transport describe"),
])
def test_inspect_refuses_arguments_it_would_ignore(argv, text, tmp_path, capsys):
    """Each of these was taken in silence (session 66): a negative row count, a chunk start without --simulate or
    infinite, a topology setting without --topology (no check ran)."""
    path = tmp_path / "p.json"
    path.write_text(_TEXT)
    code = inspect_main([*argv, str(path)])
    err = capsys.readouterr().err
    _one_error_line(code, err, prog="hoccl-inspect")
    assert text in err


def test_a_file_written_before_a_topology_field_was_added_still_loads():
    """Its id is the hash of its inputs as written (the field absent), not under today's model: still read, and an
    edit of it still refused."""
    from hoccl_compiler.schema import plan_id_of_json

    doc = _edited(lambda d: d["topology"]["costs"].pop("nic_incast_loss"))
    doc["plan_id"] = plan_id_of_json(doc["topology"], doc["collective"], doc["options"])
    assert plan_from_json(json.dumps(doc)).plan_id == doc["plan_id"]
    doc["topology"]["nic_gbps"] = 1.0
    with pytest.raises(PlanError, match="plan_id .* is not the id"):
        plan_from_json(json.dumps(doc))


def test_a_5000_digit_number_is_refused_naming_the_file(tmp_path, capsys):
    """Python refuses to convert an integer of more than 4300 digits (ValueError): a plan or topology file with
    one is a one-line error that names the file, from the library and the CLIs."""
    huge = "1" + "0" * 5000
    topo = tmp_path / "topo.json"
    topo.write_text('{"name": "x", "nodes": ' + huge + '}')
    code = compile_main(["allgather", "--size", "1M", "--topology", str(topo), "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    _one_error_line(code, err)
    assert str(topo) in err and "too long to read" in err
    plan = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="allgather", size_bytes=4096))
    text = plan.model_dump_json().replace('"chunk_bytes":', '"chunk_bytes":' + huge + ', "x":', 1)
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(PlanError, match="too long to read"):
        plan_from_json(text, source=str(path))
    code = inspect_main([str(path)])
    err = capsys.readouterr().err
    _one_error_line(code, err, "hoccl-inspect")
    assert str(path) in err and "too long to read" in err


def test_dump_after_into_a_folder_writes_nothing(tmp_path, capsys):
    """-o naming a folder is refused before anything is written: no DIR.traffic.json is left beside it."""
    out = tmp_path / "plans"
    out.mkdir()
    code = compile_main(["allgather", "--size", "1M", "--topology", "h200x2", "--dump-after", "traffic", "-o",
                         str(out)])
    err = capsys.readouterr().err
    _one_error_line(code, err)
    assert "is a folder" in err and sorted(p.name for p in tmp_path.iterdir()) == ["plans"]


def test_a_compile_too_large_for_the_memory_budget_is_refused_before_it_starts(tmp_path, capsys, monkeypatch):
    """A 65536 x 64 topology (4 M GPUs): the explicit All-to-All would need 2**44 flows, the pattern AllGather 10
    GiB; both are refused at once with the numbers and the way out, not a MemoryError after minutes."""
    topo = tmp_path / "huge.json"
    topo.write_text(json.dumps({"name": "huge", "nodes": 65536, "gpus_per_node": 64, "nvlink_gbps": 400,
                                "nic_gbps": 50}))
    monkeypatch.setenv("HOCCL_MAX_PLAN_MEMORY", str(4 << 30))
    t0 = time.monotonic()
    code = compile_main(["alltoall", "--size", "4M", "--topology", str(topo), "--pattern", "off", "-o",
                         str(tmp_path / "a.json")])
    err = capsys.readouterr().err
    _one_error_line(code, err)
    assert "17,592,186,044,416 flows" in err and "--pattern on" in err and "HOCCL_MAX_PLAN_MEMORY" in err
    code = compile_main(["allgather", "--size", "4M", "--topology", str(topo), "-o", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    _one_error_line(code, err)
    assert "pattern plan of 4,194,304 GPUs" in err and "4.0 GiB allowed" in err
    assert time.monotonic() - t0 < 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.json"]


def test_a_small_gzip_of_a_million_empty_stages_is_refused_before_decoding(tmp_path, capsys, monkeypatch):
    """4 MB of gzip that inflates to 243 MB of JSON with 1.5 M empty stages took 5.2 GB and a minute to decode: its
    cost is worked out from the JSON's size and its stage count first, against HOCCL_MAX_PLAN_MEMORY."""
    import gzip

    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="allgather", size_bytes=4096))
    data = json.loads(plan.model_dump_json())
    empty = {"index": 0, "time_s": 0.0, "chunks": [],
             "transfers": {k: [] for k in ("flow", "role", "src", "dst", "offset", "bytes", "queue", "after")}}
    data["stages"] += [dict(empty, index=i + 1) for i in range(300_000)]
    path = tmp_path / "many.json.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(json.dumps(data).encode())
    monkeypatch.setenv("HOCCL_MAX_PLAN_MEMORY", str(512 << 20))
    t0 = time.monotonic()
    code = inspect_main([str(path)])
    err = capsys.readouterr().err
    _one_error_line(code, err, "hoccl-inspect")
    assert "300,001 stages" in err and "to decode" in err and time.monotonic() - t0 < 20
    monkeypatch.delenv("HOCCL_MAX_PLAN_MEMORY")  # a real plan still loads under the default budget
    small = tmp_path / "small.json"
    small.write_text(plan.model_dump_json())
    assert inspect_main([str(small)]) == 0


def test_the_memory_bound_bounds():
    """The cap the header fuzz runs under is real: 8 GiB more cannot be had inside it, and all of it comes back."""
    with memory_bound(1.0), pytest.raises(MemoryError):
        np.ones(8 << 30, np.uint8)
    assert np.ones(64 << 20, np.uint8).sum() == 64 << 20
