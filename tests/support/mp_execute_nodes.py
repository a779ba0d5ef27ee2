"""One "node" of hr.execute on a plan of several nodes, CUDA faked in host memory (tests/support/fake_cuda.py):
run as a process per node with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (test_run_cli.py). Prints
"RESULT {rank: wrong bytes}" after running the plan twice (the second over the connections of the first)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

here = Path(__file__).resolve()
sys.path.insert(0, str(here.parent))
sys.path.insert(0, str(here.parents[2]))


def main() -> int:
    import fake_cuda
    import numpy as np
    import pytest

    mp = pytest.MonkeyPatch()
    fake_cuda.install(mp, async_streams=True)
    import hoccl_runtime as hr
    from hoccl_bench.run import POISON, expected_output, pattern
    from hoccl_runtime.nodes import close_nodes

    plan = hr.load_plan(sys.argv[1])
    node, L = int(os.environ["RANK"]), plan.topology.gpus_per_node
    outputs, buffers = {}, {}
    for r in range(node * L, (node + 1) * L):
        inp = pattern(np, r, 0, int(plan.ranks.input_bytes[r]))
        out = np.full(int(plan.ranks.output_bytes[r]), POISON, np.uint8)
        buffers[r] = (fake_cuda.dev(inp, r % L), fake_cuda.dev(out, r % L))
        outputs[r] = out
    wrong = {}
    for run in range(2):
        for out in outputs.values():
            out[:] = POISON
        hr.execute(plan, buffers)
        wrong[run] = {r: int(np.count_nonzero(out != expected_output(plan, r))) for r, out in outputs.items()}
    close_nodes()
    print("RESULT", json.dumps(wrong), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
