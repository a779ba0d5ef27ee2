"""HOCCL runtime: replays compiled plans on DMA copy engines and host-driven networks.

This package is a placeholder until the runtime lands (see the runtime issues). It must import on a
machine without a GPU and reads only the plan schema of the compiler (``hoccl_compiler.schema``).
"""

from __future__ import annotations

__all__ = ["load_plan"]


def load_plan(path):
    """Load and validate a plan file (the runtime's only input from the compiler)."""
    from hoccl_compiler.schema import load_plan as _load

    return _load(path)
