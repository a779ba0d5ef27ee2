"""The one error hierarchy of HOCCL, shared by the compiler and the runtime.

Every message names the bad value, the limit it broke and the fix.
"""

from __future__ import annotations

__all__ = [
    "HocclError",
    "TopologyError",
    "CollectiveError",
    "ScheduleError",
    "PlanError",
    "OptionsError",
]


class HocclError(Exception):
    """Base class of every error HOCCL raises on purpose."""


class TopologyError(HocclError, ValueError):
    """A topology (preset, file or flag) is invalid."""


class CollectiveError(HocclError, ValueError):
    """A collective description is invalid or unsupported (e.g. a reduction)."""


class ScheduleError(HocclError):
    """The scheduler could not build stages for the traffic (an internal limit was hit)."""


class OptionsError(HocclError, ValueError):
    """Compile options are invalid (a chunk size, a fraction)."""


class PlanError(HocclError, ValueError):
    """A plan file is corrupt, of another schema version, for another topology, or fails verification."""


def schema_problems(exc, limit: int = 5, whole: str = "plan") -> str:
    """The first ``limit`` problems of a pydantic ``ValidationError`` as one line: each field's path (``whole`` for a
    check over the whole model) and pydantic's message without its "Value error, " prefix; "(and N more)" after."""
    parts = []
    for e in exc.errors()[:limit]:
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{'.'.join(str(p) for p in e['loc']) or whole}: {msg}")
    more = f" (and {exc.error_count() - limit} more)" if exc.error_count() > limit else ""
    return "; ".join(parts) + more
