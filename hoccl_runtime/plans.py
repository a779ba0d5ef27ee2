"""The runtime's one door to the compiler: plans for this machine's topology, compiled on demand.

Everything the runtime takes from ``hoccl_compiler`` beyond the plan schema and the error classes goes through
here: the machine's topology, the compile of a call's plan, reading a plan file and the check of a plan from
outside.

The topology is the machine's, never a preset chosen for us: ``HOCCL_TOPOLOGY`` (a JSON or YAML topology file,
:func:`hoccl_compiler.topology.load_topology`) where set. Else the GPUs are looked at (:func:`gpu_links`): how
many this process sees, whether the communicator's GPU reaches each other one directly (peer access; a pair
without it gets a RuntimeWarning: copies between them go through host memory), and whether that link is NVLink
(native P2P atomics) or PCIe. The bandwidth is then

* measured once, GPU to GPU with the copy engines (:func:`measure_link_gbps`), and kept in a cache file
  (``HOCCL_CACHE_DIR``, default ``~/.cache/hoccl``) for every later process: where the link is PCIe, where no
  preset matches the GPU's name, or where ``HOCCL_MEASURE_LINKS=1`` asks for it;
* else taken from the preset the GPU's name matches: H200 (copy-engine P2P measured on the 2x H200 machine, 396
  GB/s per direction), H100 (NVLink 4, 450, NVIDIA's datasheet), H800 (about 200 per direction, the HOCCL
  paper's measured peaks).

With one GPU visible (ranks sharing it) there is no link: the preset by name, or the H100's figures with a
RuntimeWarning naming ``HOCCL_TOPOLOGY``. The node shape (nodes, GPUs per node, forwarding, copy queues) is
always the communicator's. Intra-node plans are one chunk per transfer, so the
bandwidths decide costs and stage order, not where bytes go.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple

from hoccl_compiler.schema import Plan

from .errors import HocclError
from .settings import cache_dir, env_flag, env_text

__all__ = ["per_plan", "machine_topology", "compile_call", "chain_depth", "call_spec", "CallKey", "load_plan", "verify",
           "GPU_PRESETS", "PlanCache", "PLAN_CACHE_SIZE", "gpu_links", "measure_link_gbps", "Links"]


def per_plan(cache: dict, plan: Plan, compute: Any, keep: int = 32) -> Any:
    """``compute(plan)``, kept in ``cache`` per plan object (the ``keep`` most recent; keyed by id, the plan kept with
    it so that its id stays its own)."""
    hit = cache.get(id(plan))
    if hit is None or hit[0] is not plan:
        hit = cache[id(plan)] = (plan, compute(plan))
        while len(cache) > keep:
            cache.pop(next(iter(cache)))
    return hit[1]

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
        from ._cuda import device_name

        return device_name(device)
    except Exception:  # noqa: BLE001 - no CUDA (CPU tests, fakes): no name to match
        return ""


@dataclass(frozen=True)
class Links:
    """What this process sees of GPU ``device``'s links: the visible GPU count, and per other visible GPU
    whether ``device`` reaches it directly (peer access) and over NVLink (native P2P atomics; PCIe has none)."""

    device: int
    count: int
    peer_access: dict[int, bool]
    nvlink: dict[int, bool]

    @property
    def kind(self) -> str:
        direct = [g for g, ok in self.peer_access.items() if ok]
        return "none" if not direct else ("nvlink" if all(self.nvlink[g] for g in direct) else "pcie")


def gpu_links(device: int) -> Links | None:
    """The links of ``device`` to every other GPU this process sees (None without CUDA)."""
    from ._cuda import can_access_peer, p2p_native_atomics, runtime_call

    try:
        count = int(runtime_call("getDeviceCount", "cudaGetDeviceCount"))
    except Exception:  # noqa: BLE001 - no CUDA (CPU tests, fakes)
        return None

    access: dict[int, bool] = {}
    nvlink: dict[int, bool] = {}
    for other in range(count):
        if other == device:
            continue
        access[other] = can_access_peer(device, other)  # a CUDA failure: CudaError naming the call
        nvlink[other] = access[other] and p2p_native_atomics(device, other)
    return Links(device, count, access, nvlink)


def measure_link_gbps(src: int, dst: int, nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """GB/s of one copy-engine copy from GPU ``src`` to GPU ``dst`` (the median of ``repeats`` after a warm-up,
    CUDA events on a non-blocking stream of ``src``)."""
    import cupy as cp

    from ._cuda_memory import copy_peer_async

    with cp.cuda.Device(dst):
        target = cp.empty(nbytes, cp.uint8)
    with cp.cuda.Device(src):
        source = cp.empty(nbytes, cp.uint8)
        stream = cp.cuda.Stream(non_blocking=True)
        times = []
        for i in range(repeats + 1):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            copy_peer_async(target.data.ptr, dst, source.data.ptr, src, nbytes, stream.ptr)
            end.record(stream)
            end.synchronize()
            if i:
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    del source, target
    cp.get_default_memory_pool().free_all_blocks()  # the 2 x nbytes go back to the driver, not CuPy's cache
    times.sort()
    return nbytes / times[len(times) // 2] / 1e9


def _cache_path() -> Any:
    return cache_dir() / "links.json"


def _measured_gbps(name: str, links: Links, other: int) -> float:
    """The link's bandwidth from the cache file, or measured now and kept there (a file per user: concurrent
    writers each write a whole file, the last one stays)."""
    import json
    import os
    import tempfile

    key = f"{name}|{links.count} GPUs|{links.device}->{other}|{links.kind}"
    path = _cache_path()
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    value = cache.get(key)
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    gbps = measure_link_gbps(links.device, other)
    cache[key] = round(gbps, 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".links.", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(cache, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        warnings.warn(f"cannot keep the measured link bandwidth in {path} ({exc}); set HOCCL_CACHE_DIR to a "
                      "writable directory, or it is measured again in the next process", RuntimeWarning, stacklevel=4)
    return gbps


def _bandwidths(device: int, gpus_per_node: int) -> tuple[str, dict[str, float]]:
    name = _gpu_name(device)
    preset = next(((fragment, fields) for fragment, fields, _ in GPU_PRESETS if fragment in name.upper()), None)
    links = gpu_links(device) if gpus_per_node > 1 else None
    if links is not None and links.peer_access:
        missing = sorted(g for g, ok in links.peer_access.items() if not ok)
        if missing:
            warnings.warn(f"GPU {device} cannot access GPU(s) {missing} directly (no peer access): copies between "
                          "them go through host memory, far below the link's speed; check the GPUs' topology "
                          "(nvidia-smi topo -m) and the ranks' placement", RuntimeWarning, stacklevel=3)
        # the next GPU after this one (cyclically): ranks that measure at once form a permutation, no GPU's in-port
        # shared by two measurements
        direct = sorted((g for g, ok in links.peer_access.items() if ok), key=lambda g: (g - device) % links.count)
        if name and direct and (preset is None or links.kind == "pcie" or env_flag("HOCCL_MEASURE_LINKS", False)):
            try:
                gbps = _measured_gbps(name, links, direct[0])
            except Exception as exc:  # noqa: BLE001 - a failed measurement must not stop the communicator
                warnings.warn(f"measuring the copy bandwidth GPU {device} -> GPU {direct[0]} failed ({exc}); the "
                              "plans are costed with a preset's figures: set HOCCL_TOPOLOGY to a topology file with "
                              "the machine's", RuntimeWarning, stacklevel=3)
            else:
                fields = dict(preset[1]) if preset else dict(_FALLBACK)
                fields["nvlink_gbps"] = gbps  # the in-node link, whatever it is
                return f"machine ({name}, {links.kind} measured {gbps:.0f} GB/s)", fields
    if preset is not None:
        return f"machine ({name})", preset[1]
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
    path = env_text("HOCCL_TOPOLOGY")
    if path:  # the machine's figures from the user's file, the node shape from the communicator
        fields = load_topology(path).model_dump()
        if fields["gpus_per_node"] != gpus_per_node:
            fields["peers"] = None  # the file's peer map is for another node shape: the default pairs
        fields.update(shape)
        source = f"HOCCL_TOPOLOGY={path}"
    else:
        name, found = _bandwidths(device, gpus_per_node)
        fields = {"name": name, **found, **shape}
        source = name
    try:
        return Topology(**fields)
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, into the hierarchy
        raise TopologyError(f"cannot describe this machine ({source}) as {nodes} node(s) x {gpus_per_node} GPU(s): "
                            f"{exc}") from None


def load_plan(path: Any) -> Plan:
    """A plan file, read and validated (:func:`hoccl_compiler.codec.load_plan`: any encoding, bounded in size and in
    the memory its decoding takes)."""
    from hoccl_compiler.codec import load_plan as _load

    return _load(path)


def topology_of(fields: dict) -> Any:
    """The Topology whose ``model_dump()`` is ``fields`` (how a communicator's topology reaches its proxy
    process)."""
    from hoccl_compiler.topology import Topology

    return Topology(**fields)


class CallKey(NamedTuple):
    """The name of a communicator call's plan: its cache key, and what a proxy process compiles the same plan from
    (small, hashable, picklable). Made by the class methods; the fields a kind has no use for keep their defaults."""

    kind: str
    size: int = 0        # bytes: the output of allgather / alltoall, the buffer of broadcast, scatter's / gather's
    #                      whole (world x a rank's block), a sendrecv's message
    root: int = -1       # broadcast, scatter, gather
    src: int = -1        # sendrecv
    dst: int = -1
    matrix: tuple = ()   # alltoallv: the bytes rank i sends rank j, as rows

    @classmethod
    def allgather(cls, output_bytes: int) -> CallKey:
        return cls("allgather", output_bytes)

    @classmethod
    def alltoall(cls, output_bytes: int) -> CallKey:
        return cls("alltoall", output_bytes)

    @classmethod
    def broadcast(cls, nbytes: int, root: int) -> CallKey:
        return cls("broadcast", nbytes, root)

    @classmethod
    def scatter(cls, whole_bytes: int, root: int) -> CallKey:
        return cls("scatter", whole_bytes, root)

    @classmethod
    def gather(cls, whole_bytes: int, root: int) -> CallKey:
        return cls("gather", whole_bytes, root)

    @classmethod
    def sendrecv(cls, src: int, dst: int, nbytes: int) -> CallKey:
        return cls("sendrecv", nbytes, src=src, dst=dst)

    @classmethod
    def alltoallv(cls, rows: tuple) -> CallKey:
        return cls("alltoallv", matrix=tuple(tuple(r) for r in rows))

    def __str__(self) -> str:
        if self.kind == "sendrecv":
            return f"sendrecv {self.src}->{self.dst} {self.size}"
        if self.kind == "alltoallv":
            return f"alltoallv {len(self.matrix)}x{len(self.matrix)} {sum(map(sum, self.matrix))}"
        return f"{self.kind} {self.size}" + (f" root {self.root}" if self.root >= 0 else "")


def call_spec(key: CallKey) -> Any:
    """The CollectiveSpec of a call named by a :class:`CallKey`."""
    from hoccl_compiler.collective import CollectiveSpec

    kind = key.kind
    if kind in ("allgather", "alltoall"):
        return CollectiveSpec(kind=kind, size_bytes=key.size)
    if kind == "broadcast":
        return CollectiveSpec(kind=kind, size_bytes=key.size, root=key.root, in_place=True)
    if kind in ("scatter", "gather"):
        return CollectiveSpec(kind=kind, size_bytes=key.size, root=key.root)
    if kind == "alltoallv":  # the network communicators' All-to-Allv
        return CollectiveSpec(kind=kind, matrix=key.matrix)
    if kind == "sendrecv":
        return CollectiveSpec(kind="sendrecv", pairs=((key.src, key.dst, key.size),))
    raise HocclError(f"no collective is named {key!r}")


def chain_depth(after: Any) -> Any:
    """Per transfer of a stage, how many transfers precede it along its waits (hoccl_compiler.units.chain_depth):
    the order a network executor issues a multicast plan's copies in."""
    from hoccl_compiler.units import chain_depth as depth

    return depth(after)


def compile_call(topology: Any, what: CallKey | Any, chunk_bytes: int | None, multicast: bool = False) -> Plan:
    """Compile (and, as the compiler's last pass, verify structurally: layout, tiling, stage rules, chunk orders)
    the plan of a call key or a CollectiveSpec. No byte-level replay and no baselines: this runs on a call's path
    (about 1 ms for 8 GPUs at any size on the CPU VM, where the replay made small ones 6-13 ms). ``multicast``:
    route AllGather and Broadcast for multicast (hoccl_compiler.multicast), for the paths that run forwarded
    copies (hoccl_runtime.execute); the communicators' paths do not yet."""
    from hoccl_compiler.ir import CompileOptions
    from hoccl_compiler.pipeline import compile_plan

    spec = call_spec(what) if isinstance(what, tuple) else what
    plan = compile_plan(topology, spec, CompileOptions(chunk_bytes=chunk_bytes, baselines=False, byte_replay=False,
                                                       multicast=multicast))
    _OWN[id(plan)] = plan
    return plan


# id(plan) -> plan, for the plans compile_call made (verified as it compiled) while they live: weak, so it keeps no
# plan alive, needs no size cap (a communicator's cache of 1,024 plans is recognised whole), and an id a dead plan
# leaves behind is gone with it
_OWN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def compiled_here(plan: Any) -> bool:
    """Whether ``plan`` is an object :func:`compile_call` made in this process (so it needs no verification from the
    file alone: the compiler's last pass checked it)."""
    return _OWN.get(id(plan)) is plan


def verify(plan: Plan) -> None:
    """:func:`hoccl_compiler.verify.verify_plan`: a plan from outside, checked from the file alone."""
    from hoccl_compiler.verify import verify_plan

    verify_plan(plan)
