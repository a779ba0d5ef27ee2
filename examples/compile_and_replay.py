"""A tour of the compiler's Python API: compile, write, read back, verify, replay on NumPy buffers.

    python examples/compile_and_replay.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hoccl_compiler import CollectiveSpec, compile_plan, load_plan, make_topology, replay, save_plan, verify_plan  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402


def main() -> int:
    topo = make_topology("paper-h800", nodes=2, gpus_per_node=4)  # 8 GPUs, peers (0,1), (2,3)
    spec = CollectiveSpec(kind="allgather", size_bytes=8 * 4096)
    plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=1024))
    with tempfile.TemporaryDirectory() as tmp:
        path = save_plan(plan, Path(tmp) / "ag.json")
        again = load_plan(path)
    verify_plan(again)
    rng = np.random.default_rng()
    inputs = [rng.integers(0, 256, n, dtype=np.uint8) for n in again.ranks.input_bytes]
    outputs = replay(again, inputs).outputs
    expected = np.concatenate(inputs)
    ok = all(np.array_equal(out, expected) for out in outputs)
    print(f"{spec.describe()} on {topo.describe()}")
    print(f"{len(again.stages)} stages, predicted {again.report.predicted_time_s * 1e6:.2f} us "
          f"(bound {again.report.lower_bound_s * 1e6:.2f} us); replay on random bytes: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
