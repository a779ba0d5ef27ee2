"""Loading stays bounded: decompression bombs, damaged gzip, huge claimed shapes, deep nesting."""

from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest

from hoccl_compiler import CollectiveError, CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.collective import load_matrix
from hoccl_compiler.errors import PlanError
from hoccl_compiler.schema import load_plan, save_plan
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
