"""Golden plans under schedules/: a fresh compile of each gives the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hoccl_compiler import compile_plan, load_plan, save_plan, verify_plan
from hoccl_compiler.ir import CompileOptions

SCHEDULES = Path(__file__).resolve().parents[2] / "schedules"
GOLDEN = sorted(SCHEDULES.glob("*.json"))


def test_there_are_golden_plans():
    assert len(GOLDEN) >= 4


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_plan_is_reproduced(path, tmp_path):
    golden = load_plan(path)
    verify_plan(golden)
    again = compile_plan(golden.topology, golden.collective,
                         CompileOptions(chunk_bytes=golden.options.chunk_bytes,
                                        max_extra_time=golden.options.max_extra_time,
                                        baselines=golden.report.baselines is not None,
                                        multicast=golden.options.multicast))
    fresh = save_plan(again, tmp_path / path.name)
    assert fresh.read_bytes() == path.read_bytes(), \
        f"{path.name} changed; if intended, run `python examples/make_schedules.py` and review the diff"
