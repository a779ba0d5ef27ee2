"""HOCCL compiler: collective + topology -> verified, versioned JSON plan.

    >>> from hoccl_compiler import make_topology, CollectiveSpec, compile_plan
    >>> plan = compile_plan(make_topology("paper-h800", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=1 << 30))

Nothing here imports CUDA. The plan schema (``hoccl_compiler.schema``) and errors
(``hoccl_compiler.errors``) are what the runtime reads; they import no pass.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "HocclError", "TopologyError", "CollectiveError", "ScheduleError", "PlanError", "OptionsError",
    "Topology", "PRESETS", "make_topology", "load_topology",
    "CollectiveSpec", "layout",
    "CompileOptions", "compile_plan", "compile_state", "PASSES", "PASS_NAMES",
    "Plan", "load_plan", "save_plan", "verify_plan", "replay",
    "parse_size", "format_bytes",
]

_LAZY = {
    "HocclError": "errors", "TopologyError": "errors", "CollectiveError": "errors", "ScheduleError": "errors",
    "PlanError": "errors", "OptionsError": "errors",
    "Topology": "topology", "PRESETS": "topology", "make_topology": "topology", "load_topology": "topology",
    "CollectiveSpec": "collective", "layout": "collective",
    "CompileOptions": "ir",
    "compile_plan": "pipeline", "compile_state": "pipeline", "PASSES": "pipeline", "PASS_NAMES": "pipeline",
    "Plan": "schema", "load_plan": "codec", "save_plan": "codec",
    "verify_plan": "verify", "replay": "verify",
    "parse_size": "units", "format_bytes": "units",
}


def __getattr__(name: str) -> Any:  # lazy: `import hoccl_compiler.schema` must not pull in the passes
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
