"""The ordered pass table and :func:`compile_plan`.

    traffic -> expand -> stages -> chunks -> costing -> plan -> verify

Each pass is ``run(state, options) -> state``, pure: it returns a new :class:`CompileState` with one
more field filled. ``dump_after`` (the CLI's ``--dump-after PASS``) receives any intermediate.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .codec import collector_paused
from .collective import CollectiveSpec
from .errors import ScheduleError
from .ir import CompileOptions, CompileState
from .passes import chunks, costing, expand, plan, stages, traffic
from .schema import Plan
from .topology import Topology
from .verify import verify_plan

__all__ = ["PASSES", "PASS_NAMES", "compile_plan", "compile_state", "dump_state"]

Progress = Callable[[str], None]


def _verify(state: CompileState, options: CompileOptions) -> CompileState:
    assert state.plan is not None, "verify runs after plan"
    verify_plan(state.plan, byte_replay=options.byte_replay)
    _BUILT[id(state.plan)] = state.plan
    return state


# plans this process built with the pass table and verified (by identity; gone with the plan): the compact writer
# takes their transfers as the ones its reader derives from their segments, since the reader runs these same passes
# (tests/compiler/test_compact.py checks the read-back on every kind of plan), and checks any other plan's
_BUILT: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def built_here(plan: Any) -> bool:
    """Whether ``plan`` is an object :func:`compile_state`'s pass table built and verified in this process."""
    return _BUILT.get(id(plan)) is plan


def _stages(state: CompileState, options: CompileOptions, progress: Progress | None = None) -> CompileState:
    return stages.run(state, options, progress)


PASSES: tuple[tuple[str, Callable[..., CompileState]], ...] = (
    ("traffic", traffic.run),
    ("expand", expand.run),
    ("stages", _stages),
    ("chunks", chunks.run),
    ("costing", costing.run),
    ("plan", plan.run),
    ("verify", _verify),
)
PASS_NAMES = tuple(name for name, _ in PASSES)


@collector_paused()  # a compact file's read-back runs the passes beside the lists of ints its JSON decoded
def compile_state(
    topology: Topology,
    collective: CollectiveSpec,
    options: CompileOptions | None = None,
    *,
    stop_after: str | None = None,
    progress: Progress | None = None,
) -> CompileState:
    """Run the passes in order (up to ``stop_after``) and return the state (``options.net_chunk_bytes="auto"``:
    :func:`_with_net_chunk_chosen`)."""
    options = options or CompileOptions()
    if stop_after is not None and stop_after not in PASS_NAMES:
        raise ValueError(f"unknown pass {stop_after!r}; passes are {', '.join(PASS_NAMES)}")
    if options.net_chunk_bytes == "auto":
        return _with_net_chunk_chosen(topology, collective, options, stop_after, progress)
    check_compile_memory(topology, collective)
    state = CompileState(topology=topology, collective=collective, options=options)
    for name, fn in PASSES:
        start = time.perf_counter()
        state = fn(state, options, progress) if fn is _stages else fn(state, options)
        if progress is not None:
            progress(f"pass {name}: {1e3 * (time.perf_counter() - start):.0f} ms")
        if name == stop_after:
            break
    return state


# the network chunks "auto" tries beside the plan's one chunk, where :func:`net_chunk_may_help`; one is taken only
# where the cost model v2 puts it more than NET_CHUNK_TOLERANCE ahead (a plan of one chunk keeps fewer entries)
NET_CHUNK_CANDIDATES = (1 << 20, 512 << 10, 256 << 10)
NET_CHUNK_TOLERANCE = 0.01
NET_CHUNK_MAX_NODES = 32  # each candidate is a whole compile: past this many nodes "auto" keeps one chunk


def net_chunk_may_help(topology: Topology, collective: CollectiveSpec, options: CompileOptions) -> bool:
    """Where a network chunk of its own may shorten a plan: a multicast AllGather or Broadcast across nodes (a copy
    passes on what a network transfer brought, so the network hop's chunk is that copy's wait) over RDMA verbs. Over
    TCP a network chunk is a write the host drives, whose cost per chunk the cost model does not charge, so one chunk
    stays."""
    return (options.multicast and collective.kind in ("allgather", "broadcast") and topology.transport == "verbs"
            and 1 < topology.nodes <= NET_CHUNK_MAX_NODES)


def _with_net_chunk_chosen(topology: Topology, collective: CollectiveSpec, options: CompileOptions,
                           stop_after: str | None, progress: Progress | None) -> CompileState:
    """``net_chunk_bytes="auto"``: the plan of one chunk, and where :func:`net_chunk_may_help` (and the whole pass
    table runs), the plans with each of ``NET_CHUNK_CANDIDATES`` as the network's chunk; the one with the least
    cost-model v2 time (a candidate only where it is more than ``NET_CHUNK_TOLERANCE`` ahead of one chunk). A dgx-h100
    Broadcast of 1 GiB on 4 nodes: 1.128x its collective bound with 1 MiB network chunks, 1.183x with one chunk."""
    one = dataclasses.replace(options, net_chunk_bytes=None)
    best = compile_state(topology, collective, one, stop_after=stop_after, progress=progress)
    if stop_after is not None or not net_chunk_may_help(topology, collective, one):
        return best
    limit = best.plan.report.predicted_time_s * (1 - NET_CHUNK_TOLERANCE)
    for c in NET_CHUNK_CANDIDATES:
        if progress is not None:
            progress(f"network chunks of {c >> 10} KiB: compiling that plan too")
        state = compile_state(topology, collective, dataclasses.replace(options, net_chunk_bytes=c),
                              progress=progress)
        if state.plan.report.predicted_time_s < min(limit, best.plan.report.predicted_time_s):
            best = state
    return best


# peak memory of an explicit compile per flow (the origin and HOCCL matrices, stages, transfers, chunks): 3.6-4.1 KB
# measured for All-to-All of 256 and 512 GPUs on the CPU VM (2026-12-02: 313 MB and 1.14 GB peak RSS)
COMPILE_BYTES_PER_FLOW = 4096


def check_compile_memory(topology: Topology, collective: CollectiveSpec) -> None:
    """Refuse, before building anything, a compile whose structures would not fit the memory budget
    (:func:`compile_budget`), with the numbers and what to do."""
    from .collective import flow_count

    G = topology.num_gpus
    flows = flow_count(collective, G)
    need = flows * COMPILE_BYTES_PER_FLOW
    if need <= 1 << 30:
        return  # small compiles never wait for a look at the machine's memory
    budget, which = compile_budget()
    if need > budget:
        from .pattern import pattern_applies

        hint = ("compile a pattern plan (--pattern on / pattern.compile_pattern: memory linear in the GPUs)"
                if pattern_applies(topology, collective) is None else "compile it for fewer GPUs")
        raise ScheduleError(f"{collective.kind} on {G:,} GPUs has {flows:,} flows; an explicit plan of them takes "
                            f"about {need / 2**30:,.1f} GiB to compile, over the {budget / 2**30:.1f} GiB allowed "
                            f"({which}): {hint}")


def compile_budget() -> tuple[int, str]:
    """(bytes a compile may take, where that figure comes from): HOCCL_MAX_PLAN_MEMORY where set, else 90% of the
    memory available now (MemAvailable; a compile that needs more would swap or be killed)."""
    import os

    from .codec import decode_budget

    if os.environ.get("HOCCL_MAX_PLAN_MEMORY", "").strip():
        return decode_budget(), "HOCCL_MAX_PLAN_MEMORY"
    try:
        with open("/proc/meminfo") as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
        return int(kib * 1024 * 0.9), "90% of this machine's available memory; HOCCL_MAX_PLAN_MEMORY sets another"
    except (OSError, StopIteration, ValueError):
        return decode_budget(), "half of this machine's memory; HOCCL_MAX_PLAN_MEMORY sets another"


def compile_plan(
    topology: Topology,
    collective: CollectiveSpec,
    options: CompileOptions | None = None,
    *,
    progress: Progress | None = None,
) -> Plan:
    """Compile and verify a plan (raises :class:`~hoccl_compiler.errors.HocclError` subclasses on bad input)."""
    state = compile_state(topology, collective, options, progress=progress)
    assert state.plan is not None
    return state.plan


def dump_state(state: CompileState, pass_name: str) -> dict[str, Any]:
    """A JSON-able view of the intermediate produced by ``pass_name``."""

    def arrays(obj: Any) -> dict[str, Any]:
        return {f.name: (getattr(obj, f.name).tolist() if isinstance(getattr(obj, f.name), np.ndarray)
                         else getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "costs"}

    head = {"pass": pass_name, "topology": state.topology.model_dump(mode="json"),
            "collective": state.collective.model_dump(mode="json")}
    if pass_name == "traffic":
        return {**head, "origin_matrix": state.origin.tolist(), "flows": arrays(state.layout)}
    if pass_name == "expand":
        return {**head, "hoccl_matrix": state.hoccl.tolist(), "pieces": arrays(state.pieces)}
    if pass_name == "stages":
        return {**head, "schedule": arrays(state.schedule)}
    if pass_name == "chunks":
        return {**head, "chunks": arrays(state.chunks)}
    if pass_name == "costing":
        return {**head, "stage_time_s": state.costing.stage_time_s.tolist(), "report": state.costing.report}
    return {**head, "plan": state.plan.model_dump(mode="json")}
