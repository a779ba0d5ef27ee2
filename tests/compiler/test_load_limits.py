"""Loading stays bounded: decompression bombs, damaged gzip, huge claimed shapes, deep nesting."""

from __future__ import annotations

import gzip
import json
import os
import struct

import numpy as np
import pytest

from hoccl_compiler import CollectiveError, CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.cli import compile_main
from hoccl_compiler.codec import load_plan, save_plan
from hoccl_compiler.collective import load_matrix
from hoccl_compiler.errors import PlanError
from hoccl_compiler.verify import verify_plan


def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"schema_version": 1, "pad": "' + b" " * (64 << 20) + b'"}'))
    assert bomb.stat().st_size < 200_000
    monkeypatch.setenv("HOCCL_MAX_PLAN_BYTES", str(8 << 20))
    with pytest.raises(PlanError, match=r"decompresses to more than 8388608 bytes \(HOCCL_MAX_PLAN_BYTES\)"):
        load_plan(bomb)
    with pytest.raises(PlanError, match="larger than 1000 bytes"):
        plain = tmp_path / "big.json"
        plain.write_bytes(b" " * 2000)
        load_plan(plain, max_bytes=1000)
    monkeypatch.setenv("HOCCL_MAX_PLAN_BYTES", "lots")
    with pytest.raises(PlanError, match="HOCCL_MAX_PLAN_BYTES='lots' is not a byte count"):
        load_plan(plain)


def test_damaged_and_truncated_gzip(tmp_path):
    plan = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="allgather", size_bytes=1 << 20))
    good = tmp_path / "p.json.gz"
    save_plan(plan, good)
    raw = good.read_bytes()
    assert load_plan(good) == plan
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PlanError, match="truncated gzip"):
        load_plan(tmp_path / "cut.json.gz")
    damaged = bytearray(raw)
    damaged[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.json.gz").write_bytes(bytes(damaged))
    with pytest.raises(PlanError, match="damaged gzip|not valid JSON|truncated gzip"):
        load_plan(tmp_path / "bad.json.gz")


def test_deep_nesting_is_a_plan_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanError):
        load_plan(deep)


def test_a_small_plan_claiming_many_gpus_fails_before_allocating(tmp_path):
    plan = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="alltoall", size_bytes=1 << 20))
    claims = plan.model_copy(update={"topology": make_topology("dgx-h100", nodes=2048)})  # 16,384 GPUs
    with pytest.raises(PlanError, match="claims 16384 GPUs .* origin matrix is 2 rows"):
        verify_plan(claims)


def test_an_npy_header_claiming_a_huge_shape(tmp_path):
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (99999, 99999), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"  # .npy pads its header to 64 bytes
    path = tmp_path / "m.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") +
                     np.ones(16, dtype=np.int64).tobytes())  # 128 bytes of data, not 80 GB
    with pytest.raises(CollectiveError, match=r"header claims shape \(99999, 99999\) .* truncated or corrupt"):
        load_matrix(path)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps([[0, 1], [2, 0]]))
    assert load_matrix(ok) == ((0, 1), (2, 0))


def test_a_small_plan_loads_under_a_tight_address_space_limit(tmp_path):
    """Reading a plain plan reserved cap + 1 bytes (2 GiB) at once: under ``ulimit -v`` 1.5 GiB, inspecting a plan
    of a few KB was an internal error (MemoryError). It is read in pieces now."""
    import subprocess
    import sys

    plan = tmp_path / "small.json"
    assert compile_main(["allgather", "--topology", "h200x2", "--nodes", "1", "--size", "1MiB", "-o", str(plan),
                         "-q"]) == 0
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20)); "
            "from hoccl_compiler.cli import inspect_main; "
            f"sys.exit(inspect_main([{str(plan)!r}, '--verify']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("value", [str(2**62), str(10**26)])
def test_an_absurd_plan_size_cap_is_refused(monkeypatch, tmp_path, value):
    """HOCCL_MAX_PLAN_BYTES=2**62 gave MemoryError, 10**26 OverflowError."""
    plan = tmp_path / "small.json"
    assert compile_main(["allgather", "--topology", "h200x2", "--nodes", "1", "--size", "1MiB", "-o", str(plan),
                         "-q"]) == 0
    monkeypatch.setenv("HOCCL_MAX_PLAN_BYTES", value)
    with pytest.raises(PlanError, match=rf"HOCCL_MAX_PLAN_BYTES={value} must be in 1..1099511627776"):
        load_plan(plan)


def test_a_topology_file_that_never_ends_is_refused(tmp_path):
    """--topology /dev/zero (and HOCCL_TOPOLOGY=/dev/zero, read the same way) read without end into a MemoryError;
    a file over the cap, or not text, is a TopologyError naming it."""
    from hoccl_compiler import TopologyError, load_topology
    from hoccl_compiler.topology import MAX_TOPOLOGY_BYTES

    with pytest.raises(TopologyError, match=f"larger than {MAX_TOPOLOGY_BYTES} bytes"):
        load_topology("/dev/zero")
    binary = tmp_path / "t.json"
    binary.write_bytes(b"\xff\xfe" * 10)
    with pytest.raises(TopologyError, match="not UTF-8 text"):
        load_topology(binary)


def test_a_small_compact_file_claiming_a_huge_collective_is_refused_before_decoding(tmp_path, monkeypatch):
    """A 2.4 KB compact plan whose header claims 4096-16384 GPUs ran the traffic passes into a MemoryError (5.9 GB
    after 17 s); the decode's memory is estimated from the header and refused over the budget, with the numbers."""
    import time

    from hoccl_compiler.codec import plan_from_json
    from hoccl_compiler.compact import to_compact

    plan = compile_plan(make_topology("paper-h800", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=16 << 20))
    doc = json.loads(json.dumps(to_compact(plan)))
    doc["topology"]["nodes"] = 2048  # 16,384 GPUs
    monkeypatch.setenv("HOCCL_MAX_PLAN_MEMORY", str(8 << 30))
    t0 = time.monotonic()
    with pytest.raises(PlanError, match=r"claims alltoall over 16,384 GPUs: decoding it would take about 512\.0 GiB"):
        plan_from_json(json.dumps(doc))
    assert time.monotonic() - t0 < 2
    monkeypatch.setenv("HOCCL_MAX_PLAN_MEMORY", "lots")
    with pytest.raises(PlanError, match="HOCCL_MAX_PLAN_MEMORY='lots' is not a byte count"):
        plan_from_json(json.dumps(doc))
