"""Regenerate the golden plans under schedules/ (the tests compare fresh compiles against them).

    python examples/make_schedules.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = [
    # (file, argv for hoccl-compile)
    ("figure6-alltoall-2x2-64KiB.json", ["alltoall", "--topology", "paper-h800", "--nodes", "2", "--gpus-per-node", "2",
                                         "--size", "64KiB", "--chunk", "8KiB"]),
    ("allgather-h200x2-1GiB.json", ["allgather", "--topology", "h200x2", "--nodes", "1", "--size", "1GiB"]),
    ("alltoall-h200x2-1GiB.json", ["alltoall", "--topology", "h200x2", "--nodes", "1", "--size", "1GiB"]),
    ("sendrecv-pipeline-2x8-64MiB.json", ["sendrecv", "--topology", "paper-h800", "--nodes", "2", "--size", "64MiB"]),
    ("alltoall-h200x2-2nodes-256MiB.json", ["alltoall", "--topology", "h200x2", "--nodes", "2", "--size", "256MiB"]),
    ("a2a-4x8-1GiB.json", ["alltoall", "--topology", "paper-h800", "--nodes", "4", "--size", "1GiB"]),
]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from hoccl_compiler.cli import compile_main

    for name, argv in GOLDEN:
        code = compile_main([*argv, "-o", str(ROOT / "schedules" / name), "-q"])
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
