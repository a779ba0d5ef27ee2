"""Rank 1 asks for a GPU that is not there; rank 0 must hear of it at once (run by tests/gpu/test_gpu_start.py).

    python -m torch.distributed.run --nproc_per_node 2 tests/support/mp_start_failure.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import hoccl_runtime as hr  # noqa: E402

rank = int(os.environ["RANK"])
t0 = time.monotonic()
try:
    comm = hr.init(device=0 if rank == 0 else 7, timeout_s=60)
    print(f"UP rank {rank}", flush=True)
    comm.close()
except Exception as exc:  # noqa: BLE001 - what each rank saw is the result
    print(f"START-FAIL rank {rank} after {time.monotonic() - t0:.2f} s: {type(exc).__name__}: {exc}", flush=True)
