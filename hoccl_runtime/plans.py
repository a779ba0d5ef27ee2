"""The runtime's one door to the compiler: plans for this machine's topology, compiled on demand.

Everything the runtime takes from ``hoccl_compiler`` beyond the plan schema and the error classes goes through
here: the machine's topology, the compile of a call's plan, the check of a plan from outside, and the resident
offsets of in-place collectives (until plans carry them).

The topology is the machine's, never a preset chosen for us: ``HOCCL_TOPOLOGY`` (a JSON or YAML topology file,
:func:`hoccl_compiler.topology.load_topology`) where set; else the GPU's name picks the bandwidths of a matching
preset: H200 (copy-engine P2P measured on the 2x H200 machine, 396 GB/s per direction), H100 (NVLink 4, 450,
NVIDIA's datasheet), H800 (about 200 per direction, the HOCCL paper's measured peaks); a GPU no preset matches
gets the H100's figures and a RuntimeWarning naming ``HOCCL_TOPOLOGY``. The node shape (nodes, GPUs per node,
forwarding, copy queues) is always the communicator's. Intra-node plans are one chunk per transfer, so the
bandwidths decide costs and stage order, not where bytes go.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from hoccl_compiler.schema import Plan

from .errors import HocclError

__all__ = ["machine_topology", "compile_call", "call_spec", "verify", "resident", "GPU_PRESETS", "PlanCache",
           "PLAN_CACHE_SIZE"]

PLAN_CACHE_SIZE = 1024  # plans a communicator keeps: MoE All-to-Allv sizes change every step, each a new plan


class PlanCache(dict):
    """A dict of compiled plans (or their states) that forgets the oldest entry beyond ``maxsize`` (a forgotten
    plan is compiled again, about 1 ms, if it comes back). Reads are plain ``dict.get``: nothing on the hot
    path."""

    def __init__(self, maxsize: int = PLAN_CACHE_SIZE):
        super().__init__()
        self.maxsize = maxsize

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self and len(self) >= self.maxsize:
            del self[next(iter(self))]
        super().__setitem__(key, value)

# GPU name fragment -> (preset fields, where the figure comes from); the first match wins
GPU_PRESETS: tuple[tuple[str, dict[str, float], str], ...] = (
    ("H200", {"nvlink_gbps": 396.0, "nic_gbps": 18.9}, "measured on the 2x H200 machine (copy-engine P2P; TCP)"),
    ("H100", {"nvlink_gbps": 450.0, "nic_gbps": 50.0}, "NVIDIA DGX H100 datasheet (NVLink 4 per direction)"),
    ("H800", {"nvlink_gbps": 200.0, "nic_gbps": 50.0}, "the HOCCL paper's measured P2P peak (192 GB/s)"),
)
_FALLBACK = {"nvlink_gbps": 450.0, "nic_gbps": 50.0}


@functools.lru_cache(maxsize=8)
def _gpu_name(device: int) -> str:
    try:
        from ._cuda import cupy_runtime

        name = cupy_runtime().getDeviceProperties(device)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no CUDA (CPU tests, fakes): no name to match
        return ""


def _bandwidths(device: int) -> tuple[str, dict[str, float]]:
    name = _gpu_name(device)
    for fragment, fields, _source in GPU_PRESETS:
        if fragment in name.upper():
            return f"machine ({name})", fields
    if name:
        warnings.warn(f"no topology preset matches GPU {name!r}: its plans are costed with NVLink "
                      f"{_FALLBACK['nvlink_gbps']:g} GB/s per direction; set HOCCL_TOPOLOGY to a topology file with "
                      "the machine's figures", RuntimeWarning, stacklevel=3)
    return f"machine ({name or 'unknown GPU'})", _FALLBACK


def machine_topology(*, nodes: int, gpus_per_node: int, device: int = 0, forwarding: str | None = None,
                     dma_queues: int | None = None) -> Any:
    """The topology the runtime compiles this communicator's plans for (see the module docstring)."""
    from hoccl_compiler.errors import TopologyError
    from hoccl_compiler.topology import Topology, load_topology

    shape: dict[str, Any] = {"nodes": nodes, "gpus_per_node": gpus_per_node}
    if forwarding is not None:
        shape["forwarding"] = forwarding
    if dma_queues is not None:
        shape["dma_queues"] = dma_queues
    from .settings import env_text

    path = env_text("HOCCL_TOPOLOGY")
    if path:  # the machine's figures from the user's file, the node shape from the communicator
        fields = load_topology(path).model_dump()
        if fields["gpus_per_node"] != gpus_per_node:
            fields["peers"] = None  # the file's peer map is for another node shape: the default pairs
        fields.update(shape)
        source = f"HOCCL_TOPOLOGY={path}"
    else:
        name, found = _bandwidths(device)
        fields = {"name": name, **found, **shape}
        source = name
    try:
        return Topology(**fields)
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, into the hierarchy
        raise TopologyError(f"cannot describe this machine ({source}) as {nodes} node(s) x {gpus_per_node} GPU(s): "
                            f"{exc}") from None


def call_spec(key: tuple) -> Any:
    """The CollectiveSpec of a call named by the communicators' small tuple keys."""
    from hoccl_compiler.collective import CollectiveSpec

    kind = key[0]
    if kind in ("allgather", "alltoall"):
        return CollectiveSpec(kind=kind, size_bytes=key[1])
    if kind == "broadcast":
        return CollectiveSpec(kind=kind, size_bytes=key[1], root=key[2], in_place=True)
    if kind in ("scatter", "gather"):
        return CollectiveSpec(kind=kind, size_bytes=key[1], root=key[2])
    if kind == "alltoallv":  # ("alltoallv", matrix as a tuple of rows): the network communicators' All-to-Allv
        return CollectiveSpec(kind=kind, matrix=key[1])
    if kind == "sendrecv":
        return CollectiveSpec(kind="sendrecv", pairs=((key[1], key[2], key[3]),))
    raise HocclError(f"no collective is named {key!r}")


def compile_call(topology: Any, what: tuple | Any, chunk_bytes: int) -> Plan:
    """Compile (and, as the compiler's last pass, verify structurally: layout, tiling, stage rules, chunk orders)
    the plan of a call key or a CollectiveSpec. No byte-level replay and no baselines: this runs on a call's path
    (about 1 ms for 8 GPUs at any size on the CPU VM, where the replay made small ones 6-13 ms)."""
    from hoccl_compiler.ir import CompileOptions
    from hoccl_compiler.pipeline import compile_plan

    spec = call_spec(what) if isinstance(what, tuple) else what
    return compile_plan(topology, spec, CompileOptions(chunk_bytes=chunk_bytes, baselines=False, byte_replay=False))


def verify(plan: Plan) -> None:
    """:func:`hoccl_compiler.verify.verify_plan`: a plan from outside, checked from the file alone."""
    from hoccl_compiler.verify import verify_plan

    verify_plan(plan)


def resident(plan: Plan) -> tuple[Any, Any]:
    """(offset, bytes) per rank of the input already in place in its output (in-place collectives), as the plan
    carries them (schema 2; verified with the rest of the plan)."""
    return plan.ranks.resident_offset, plan.ranks.resident_bytes
