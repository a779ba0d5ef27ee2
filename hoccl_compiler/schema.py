"""The plan file: the only contract between the compiler and the runtime.

Pydantic models (frozen, ``extra="forbid"``) with a ``schema_version``; the JSON Schema generated
from them is checked in as ``plan.schema.json``. Large tables are stored by column (one list per
field in the file, one :class:`IntColumn` in memory) so that a plan of a million flows stays a few tens of megabytes
and loads fast. A tool that never imports hoccl can read, verify and draw a plan: docs/plan-format.md describes every
field.

The types and their validation only: this module imports nothing of the compiler's passes or encodings (a test
holds it so). Reading and writing files, in every encoding, is :mod:`hoccl_compiler.codec`'s.
"""

from __future__ import annotations

import array
import hashlib
import json
import numbers
from enum import IntEnum
from typing import Annotated, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_serializer, model_validator

from .collective import CollectiveSpec
from .errors import PlanError
from .topology import Topology

__all__ = [
    "SCHEMA_VERSION", "Plan", "Stage", "TransferTable", "QueueTable", "FlowTable", "RankBuffers",
    "PlanOptions", "Report", "Baselines", "RoleInfo", "Role", "PLAN_ROLES", "plan_id_for", "plan_id_of_json",
    "check_plan_id", "BREAKDOWN_REQUIRED", "BREAKDOWN_OPTIONAL",
    "plan_json_schema", "check_plan_topology", "PRETTY_LIMIT", "IntColumn", "chunk_sizes", "plan_chunk_sizes",
    "waited_chunk", "mixed_sizes",
]

SCHEMA_VERSION = 2  # 2: ranks carry the resident offsets of in-place collectives
PRETTY_LIMIT = 100_000  # plans with at most this many chunk entries are written indented


# Every integer of a plan fits a signed 64-bit integer (the readers hold the tables as int64 arrays): a larger one,
# only in an edited or corrupt file, is refused as the schema's error instead of overflowing in a reader.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


_array_getitem = array.array.__getitem__


class IntColumn(array.array):
    """A column of a plan table: signed 64-bit integers in one buffer (``array.array('q')``), not a list of Python
    ints. A 1024-GPU All-to-All's tables hold about 33 M integers: as lists, some 1 GB of int objects, built one by
    one (``tolist``) and turned back into arrays one by one (``np.asarray``) by every reader. This column indexes and
    iterates as a list does (Python ints out; a slice, a copy or a deep copy is a column), compares equal to a list or
    tuple of the same ints, and NumPy reads it without a copy (``np.asarray(column)`` is a view of its buffer). The
    file holds it as a JSON list, as before. Indexing goes through Python (about 0.12 us an index, 8x a list's): a loop
    over millions of entries reads ``np.asarray(column)`` or ``column.tolist()`` instead.

    Build one from an array with :meth:`of`; a plan table validated from JSON gets its lists turned into columns."""

    __slots__ = ()

    def __new__(cls, data=()):
        return super().__new__(cls, "q", data)

    @classmethod
    def of(cls, values) -> IntColumn:
        """The column of ``values`` (a NumPy array or any sequence of ints), copied once into its buffer (read through
        a byte view: ``tobytes`` would copy it twice)."""
        col = cls()
        col.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.int64)).cast("B"))
        return col

    def __getitem__(self, index):  # a slice is a column too (array.array's own would be a plain array)
        got = _array_getitem(self, index)
        return IntColumn(got) if isinstance(index, slice) else got

    def __copy__(self) -> IntColumn:
        return IntColumn(self)

    def __deepcopy__(self, memo) -> IntColumn:
        return IntColumn(self)

    def __eq__(self, other):
        if isinstance(other, array.array):
            return array.array.__eq__(self, other)
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # mutable, as a list

    def __repr__(self) -> str:
        return f"IntColumn({self.tolist()!r})" if len(self) <= 20 else f"IntColumn(<{len(self)} ints>)"

    def __reduce__(self):
        return type(self), (array.array("q", self),)


def _as_list(value):
    return value.tolist() if isinstance(value, array.array) else value


# a table's integer column: validated as a list of Int64 (the schema is unchanged), held as an IntColumn, written as
# a list
IntList = Annotated[list[Int64], AfterValidator(IntColumn), PlainSerializer(_as_list, return_type=list[int])]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleInfo(_Model):
    name: Literal["local", "native", "send_forward", "rdma", "recv_forward"]
    domain: Literal["local", "nvlink", "rdma"]


class Role(IntEnum):
    """A transfer's role, the code a plan stores (the one definition: the compiler's passes, the verifier and the
    runtime's executors take these)."""

    LOCAL = 0         # within a GPU (the rank's own block)
    NATIVE = 1        # GPU to GPU over NVLink, within a node
    SEND_FORWARD = 2  # u -> ū over NVLink: to the GPU whose NIC sends it
    RDMA = 3          # ū -> v̄ between nodes
    RECV_FORWARD = 4  # v̄ -> v over NVLink: from the GPU whose NIC received it

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def domain(self) -> str:
        return {Role.LOCAL: "local", Role.RDMA: "rdma"}.get(self, "nvlink")


PLAN_ROLES: tuple[RoleInfo, ...] = tuple(RoleInfo(name=r.label, domain=r.domain) for r in Role)


class _Columns(_Model):
    """A table stored by column: every field is a list, all of one length."""

    @model_validator(mode="after")
    def _same_lengths(self) -> _Columns:
        lengths = {name: len(getattr(self, name)) for name in type(self).model_fields
                   if getattr(self, name) is not None}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{type(self).__name__} columns differ in length: {lengths}")
        return self


class FlowTable(_Columns):
    """One flow per (src, dst) pair of the origin matrix: bytes read at src_offset of src's input,
    written at dst_offset of dst's output. A multicast plan (``options.multicast``) may cut a pair's block into
    consecutive parts, one flow each, and carries ``via``: flow f with ``via[f] = g >= 0`` reads the same bytes
    as flow g from the output of ``dst[g]`` (at ``dst_offset[g]``), chunk k after flow g's chunk k has landed
    there; -1: from src's input. Plans without multicast leave ``via`` out."""

    src: IntList
    dst: IntList
    bytes: IntList
    src_offset: IntList
    dst_offset: IntList
    via: IntList | None = None

    @model_serializer(mode="wrap")
    def _leave_out_unicast(self, handler):
        data = handler(self)
        if self.via is None:
            data.pop("via", None)
        return data



class RankBuffers(_Model):
    """Per rank: its input's and output's sizes, and where its input already sits in its output in an in-place
    collective (``resident_offset``, ``resident_bytes``; 0 bytes where none), which a runtime needs to take an
    in-place call's input as a slice of its output."""

    input_bytes: IntList
    output_bytes: IntList
    resident_offset: IntList
    resident_bytes: IntList


class QueueTable(_Columns):
    """Queue q belongs to GPU gpu[q]. Kinds: "dma" (a copy-engine stream for the GPU's sends over
    NVLink: native, send_forward), "dma_local" (its local copies), "dma_recv" (forwarding what the
    GPU's NIC received: recv_forward) and "nic" (network writes)."""

    gpu: IntList
    kind: list[Literal["dma", "dma_local", "dma_recv", "nic"]]
    index: IntList



class TransferTable(_Columns):
    """The transfers of one stage. Transfer i moves bytes [offset, offset + bytes) of flow[i] from GPU
    src[i] to GPU dst[i] in the role role[i] (an index into Plan.roles), on queue queue[i]. Chunk k of
    transfer i starts after chunk k of transfer after[i] (an index in this stage) has landed (where the two
    have chunks of different sizes, the chunk of after[i] that holds chunk k's last byte); -1: no wait."""

    flow: IntList
    role: IntList
    src: IntList
    dst: IntList
    offset: IntList
    bytes: IntList
    queue: IntList
    after: IntList



class Stage(_Model):
    """One stage. ``chunks`` is the stage's chunk order: each entry is a transfer index, its k-th
    occurrence is chunk k of that transfer (bytes [k * c, (k + 1) * c) of the transfer's range, c the
    options' chunk_bytes, or net_chunk_bytes for a network transfer where it is set). Every queue runs, in
    this order, the entries whose transfer sits on it."""

    index: int = Field(ge=0, le=INT64_MAX)
    time_s: float = Field(ge=0, description="predicted duration in the cost model")
    transfers: TransferTable
    chunks: IntList


class PlanOptions(_Model):
    chunk_bytes: int = Field(gt=0, le=INT64_MAX)
    net_chunk_bytes: int | None = Field(default=None, gt=0, le=INT64_MAX,
                                        description="the chunk size of the network (rdma) transfers, where it is not "
                                        "chunk_bytes; chunk k of a transfer waits for the chunk of the transfer it "
                                        "follows that holds its last byte. Written only where set")
    max_extra_time: float | None = Field(default=None, ge=0, le=1,
                                         description="RDMA-time fraction the scheduler could spend to cut stages "
                                         "(None: the stages the cost model v2 says pay for their barriers)")
    multicast: bool = Field(default=False, description="the flows are routed for multicast (FlowTable.via); "
                            "written only when true, so unicast plans keep their ids and bytes")

    @model_serializer(mode="wrap")
    def _leave_out_unicast(self, handler):
        data = handler(self)
        if not self.multicast:
            data.pop("multicast", None)
        if self.net_chunk_bytes is None:
            data.pop("net_chunk_bytes", None)
        return data


class Baselines(_Model):
    everything_at_once_s: float
    naive_rounds_s: float | None  # None: not costed (its rounds times the GPUs past NAIVE_ROUNDS_CELLS)
    naive_rounds: Int64


class Report(_Model):
    predicted_time_s: float
    lower_bound_s: float
    lower_bound_by_domain_s: dict[str, float]
    ratio: float
    rdma_stages: Int64
    baselines: Baselines | None = None
    cost_model: Literal["v2"] | None = Field(default=None, description="the model of predicted_time_s, stage "
                                             "times and baselines (None: plans before the cost model v2)")
    breakdown_s: dict[str, float] | None = Field(default=None, description="predicted_time_s in parts: ports (the "
                                                 "port model's stage times), call_s, stages_s, stage_sync_s and "
                                                 "net_flows_s (absent in files written before it), each finite "
                                                 "and >= 0")

    @model_validator(mode="after")
    def _breakdown(self) -> Report:
        parts = self.breakdown_s
        if parts is None:
            return self
        missing = BREAKDOWN_REQUIRED - parts.keys()
        unknown = parts.keys() - BREAKDOWN_REQUIRED - BREAKDOWN_OPTIONAL
        if missing or unknown:
            raise ValueError(f"breakdown_s must hold {sorted(BREAKDOWN_REQUIRED)} (and may hold "
                             f"{sorted(BREAKDOWN_OPTIONAL)}); it lacks {sorted(missing)} and has {sorted(unknown)}")
        bad = [k for k, v in parts.items() if not 0 <= v < float("inf")]
        if bad:
            raise ValueError(f"breakdown_s[{bad[0]!r}] is {parts[bad[0]]}, not a time in seconds (finite, >= 0)")
        return self


#: the parts of a report's breakdown_s: those every v2 report holds, and those it may (absent in older files)
BREAKDOWN_REQUIRED = frozenset({"ports", "call_s", "stages_s", "stage_sync_s"})
BREAKDOWN_OPTIONAL = frozenset({"net_flows_s"})


class Plan(_Model):
    """A compiled, verified schedule for one collective on one topology."""

    schema_version: Literal[2]
    plan_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    generator: str
    topology: Topology
    collective: CollectiveSpec
    options: PlanOptions
    roles: tuple[RoleInfo, ...]
    ranks: RankBuffers
    origin_matrix: list[IntList]
    hoccl_matrix: list[IntList]
    flows: FlowTable
    queues: QueueTable
    stages: list[Stage]
    report: Report

    @model_validator(mode="after")
    def _roles(self) -> Plan:
        if tuple(self.roles) != PLAN_ROLES:
            raise ValueError(f"roles must be {[r.name for r in PLAN_ROLES]} in that order")
        return self

    @property
    def num_ranks(self) -> int:
        return self.topology.num_gpus

    def num_chunk_entries(self) -> int:
        return sum(len(s.chunks) for s in self.stages)


def plan_id_for(topology: Topology, collective: CollectiveSpec, options: PlanOptions) -> str:
    """A stable id hashed from the inputs (no timestamps, no randomness)."""
    return plan_id_of_json(topology.model_dump(mode="json"), collective.model_dump(mode="json"),
                           options.model_dump(mode="json"))


def plan_id_of_json(topology: dict, collective: dict, options: dict) -> str:
    """:func:`plan_id_for` of the inputs as a plan file holds them: a file written before a topology field was
    added (with its default) hashes to its own id here, not under today's model."""
    payload = json.dumps({"schema_version": SCHEMA_VERSION, "topology": topology, "collective": collective,
                          "options": options}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def check_plan_id(data: dict, computed: str, source: str) -> None:
    """Refuse a plan file whose ``plan_id`` is not the id of its topology, collective and options: neither
    ``computed`` (the id of the inputs as read, today's defaults filled in) nor the id of them as written (a file
    written before a topology field was added). Such a file was edited or is corrupt, and ranks that compare ids to
    find mismatched plans would take it for another."""
    written = data.get("plan_id")
    if written == computed or plan_id_of_json(data["topology"], data["collective"], data["options"]) == written:
        return
    raise PlanError(f"{source}: its plan_id {written!r} is not the id of its topology, collective and options "
                    f"({computed}); the file was edited or is corrupt: recompile it")


def plan_json_schema() -> str:
    """The JSON Schema of the plan file, as checked in (deterministic text)."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"


# --- files -------------------------------------------------------------------------------------------

def check_plan_topology(plan: Plan, topology: Topology) -> None:
    """Refuse a plan compiled for another topology, naming the first difference."""
    mine, theirs = plan.topology.model_dump(), topology.model_dump()
    for key in mine:
        if mine[key] != theirs[key] and key != "name":
            raise PlanError(
                f"plan {plan.plan_id} was compiled for topology {plan.topology.name!r} with {key}={mine[key]!r}, "
                f"but this system has {key}={theirs[key]!r}; recompile the plan for this topology"
            )


def chunk_sizes(role: np.ndarray, chunk_bytes: int, net_chunk_bytes: int | None = None) -> np.ndarray:
    """Each transfer's chunk size: ``net_chunk_bytes`` for a network transfer where it is given, else
    ``chunk_bytes`` (a plan's ``options``: :func:`plan_chunk_sizes`)."""
    role = np.asarray(role, dtype=np.int64)
    if net_chunk_bytes is None or net_chunk_bytes == chunk_bytes:
        return np.full(role.shape, chunk_bytes, dtype=np.int64)
    return np.where(role == int(Role.RDMA), net_chunk_bytes, chunk_bytes).astype(np.int64)


def plan_chunk_sizes(plan: Plan, role) -> np.ndarray:
    """:func:`chunk_sizes` of a plan's transfers (``role``: their roles)."""
    return chunk_sizes(role, plan.options.chunk_bytes, plan.options.net_chunk_bytes)


def mixed_sizes(size: np.ndarray) -> bool:
    """Whether transfers' chunk sizes (:func:`chunk_sizes`) differ, so that a chunk may wait for another index than
    its own (:func:`waited_chunk`)."""
    return bool(size.size) and bool((size != size.flat[0]).any())


def waited_chunk(k, size, after_size, nbytes):
    """The chunk that chunk ``k`` of a transfer of ``nbytes`` bytes in chunks of ``size`` waits for in the transfer it
    follows (the same bytes, in chunks of ``after_size``): the one that holds its last byte. A transfer's chunks run
    in order on its queue, so once that one landed every byte before it has too. Equal sizes: chunk k. NumPy arrays,
    or integers (then a Python int)."""
    if isinstance(k, numbers.Integral) and isinstance(size, numbers.Integral) and isinstance(nbytes, numbers.Integral):
        return max(0, min((int(k) + 1) * int(size), int(nbytes)) - 1) // int(after_size)
    return np.maximum(0, np.minimum((k + 1) * size, nbytes) - 1) // after_size
