"""Topologies: nodes x GPUs, NVLink and NIC bandwidths, DMA queues, the symmetric-peer map.

A topology is a pydantic model (it is read from files and written into every plan). Bandwidths
are in GB/s (10^9 bytes per second), per GPU and per direction. Every GPU has one NIC (a rail).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import TopologyError

__all__ = ["Topology", "CostParams", "PRESETS", "TRANSPORT_COSTS", "load_topology", "make_topology", "default_peers"]

Forwarding = Literal["symmetric", "none"]


def default_peers(gpus_per_node: int) -> tuple[int, ...]:
    """Pairs (0,1), (2,3), ...; with an odd count the last GPU is its own peer (no forwarding)."""
    peers = []
    for local in range(gpus_per_node):
        partner = local ^ 1
        peers.append(partner if partner < gpus_per_node else local)
    return tuple(peers)


class CostParams(BaseModel):
    """The fixed costs of the cost model v2 (:mod:`hoccl_compiler.cost`), beside the bandwidths. Defaults are the
    H200 machines' measured figures (docs/benchmarks.md, "Cost model v2 against measured runs"; how each was
    measured: docs/results/cost-params-history.md).

    * ``dma_start_us`` (2.5 us): each chunk a copy queue starts (the DMA engine is serial: no bytes move meanwhile).
    * ``nic_start_us`` (0 us): each chunk a NIC queue posts (not measured: no RDMA NIC; the TCP path's per-write
      costs are inside its measured bandwidth).
    * ``call_us`` (14.8 us): a call's start on one node before any copy (the ranks' rendezvous).
    * ``net_call_us`` (871 us over TCP): the start of a plan with network transfers (the first chunk's staging, the
      last one's landing, the notices between nodes).
    * ``net_flow_us`` (381 us over TCP): each further network transfer of the busiest GPU (its rings carry them in
      turn).
    * ``net_node_flow_us`` (262 us over TCP): each further network transfer of the busiest node (its driving thread
      handles them in turn); a plan pays the more of the two.
    * ``stage_sync_us`` (0 us): a barrier between two stages (neither executor has one).
    * ``nvlink_duplex`` (1.026, a factor): how much slower each direction of a GPU's NVLink runs with data moving
      both ways at once.
    * ``net_staging_gbps`` (22 GB/s over TCP): the host staging of the network path, the first chunk's copy into the
      sending host's ring and the last one's out of the receiving host's (0: no staging, an RDMA NIC writing GPU
      memory).

    * ``nic_incast_loss`` (0, a fraction): convergence at a NIC: with ``k`` GPUs sending into one NIC's in-port at
      once it runs at ``1 / (1 + loss (k - 1))`` of its bandwidth (what the stages, one flow per NIC each, avoid).
      Not measured (no RDMA NIC here), so 0; set it to see what staging is for (an audit took 0.15).

    The four network costs are the transport's (``TRANSPORT_COSTS``, chosen by ``Topology.transport``); the defaults
    here are the TCP profile's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dma_start_us: float = Field(default=2.5, ge=0, allow_inf_nan=False)
    nic_start_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    call_us: float = Field(default=14.8, ge=0, allow_inf_nan=False)
    net_call_us: float = Field(default=871.0, ge=0, allow_inf_nan=False)
    net_flow_us: float = Field(default=381.0, ge=0, allow_inf_nan=False)
    net_node_flow_us: float = Field(default=262.0, ge=0, allow_inf_nan=False)
    stage_sync_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    nvlink_duplex: float = Field(default=1.026, ge=1, allow_inf_nan=False)
    net_staging_gbps: float = Field(default=22.0, ge=0, allow_inf_nan=False)
    nic_incast_loss: float = Field(default=0.0, ge=0, le=10, allow_inf_nan=False)


# The network path's host costs belong to the transport that moves the bytes, not to the machine's shape: a
# topology takes the profile of its ``transport`` for every cost it does not set itself.
# - tcp: the TCP transport as the network executor drives it, measured on the H200 machines
#   (examples/measure_net_costs.py; docs/results/cost-params-history.md): the CostParams defaults.
# - verbs: the verbs transport's host code on the fake NIC (examples/measure_verbs_host_costs.py, 2026-12-07, the
#   2-core CPU VM, the median of ten runs of 100 calls, which gave 204-553 / 393-579 / 68-180 us: noisy on 2 cores;
#   the executor of 2026-12-02 gave 253 / 410 / 68, and today's before its data path's modules were looked up once
#   and its CQ drained once a turn 322 / 634 / 142: docs/results/2026-12-07-s65/verbs-host.txt): the busiest node's
#   driving-thread CPU time, NOT MEASURED ON A NIC (no NIC latency, no wire); no host staging (the NIC writes GPU
#   memory, GPUDirect).
TRANSPORT_COSTS: dict[str, dict[str, float]] = {
    "tcp": dict(net_call_us=871.0, net_flow_us=381.0, net_node_flow_us=262.0, net_staging_gbps=22.0),
    "verbs": dict(net_call_us=312.0, net_flow_us=482.0, net_node_flow_us=96.0, net_staging_gbps=0.0),
}
Transport = Literal["tcp", "verbs"]


class Topology(BaseModel):
    """A cluster of ``nodes`` identical nodes, each of ``gpus_per_node`` GPUs.

    ``peers[i]`` is the symmetric peer of local GPU ``i``: inter-node flows leave a node from the
    sender's peer and enter it at the receiver's peer (the paper's u -> ū -> v̄ -> v path).
    ``forwarding="none"`` sends every inter-node flow straight from its source GPU's NIC.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    nodes: int = Field(ge=1, le=65536, strict=True)
    gpus_per_node: int = Field(ge=1, le=64, strict=True)
    nvlink_gbps: float = Field(gt=0, allow_inf_nan=False, description="NVLink bandwidth per GPU and direction, GB/s")
    nic_gbps: float = Field(gt=0, allow_inf_nan=False, description="NIC bandwidth per GPU and direction, GB/s")
    dma_queues: int = Field(default=1, ge=1, le=16, strict=True,
                            description="DMA (copy-engine) queues per GPU a plan uses")
    peers: tuple[int, ...] | None = Field(default=None, description="symmetric peer of each local GPU")
    forwarding: Forwarding = "symmetric"
    transport: Transport = Field(default="tcp", description="what moves the bytes between nodes; its host costs "
                                 "(TRANSPORT_COSTS) fill every network cost that ``costs`` does not set")
    costs: CostParams = Field(default_factory=CostParams, description="fixed costs of the cost model (us)")

    @model_validator(mode="before")
    @classmethod
    def _transport_costs(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        transport = data.get("transport", "tcp")
        # a transport that is not a name (a list, a dict: a tampered file) is the field's own error, not a lookup's
        profile = TRANSPORT_COSTS.get(transport) if isinstance(transport, str) else None
        costs = data.get("costs")
        if profile is None or isinstance(costs, CostParams):
            return data  # an unknown transport is the field's own error; given costs are kept whole
        if costs is None or isinstance(costs, dict):
            data = {**data, "costs": {**profile, **(costs or {})}}
        return data

    @model_validator(mode="after")
    def _check_peers(self) -> Topology:
        if self.peers is None:
            object.__setattr__(self, "peers", default_peers(self.gpus_per_node))
        peers = self.peers
        assert peers is not None
        if len(peers) != self.gpus_per_node:
            raise ValueError(
                f"peers has {len(peers)} entries but gpus_per_node is {self.gpus_per_node}; "
                "give one peer per local GPU"
            )
        for local, peer in enumerate(peers):
            if not 0 <= peer < self.gpus_per_node:
                raise ValueError(
                    f"peers[{local}] = {peer} is outside the node (0..{self.gpus_per_node - 1}); "
                    "a peer is a local GPU index"
                )
        for local, peer in enumerate(peers):
            if peers[peer] != local:
                raise ValueError(
                    f"the peer map is not an involution: peers[{local}] = {peer} but peers[{peer}] = "
                    f"{peers[peer]}; symmetric peers come in pairs (or a GPU is its own peer)"
                )
        return self

    # --- derived quantities -------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def peer_of(self, gpu: int) -> int:
        """The global index of ``gpu``'s symmetric peer (itself when forwarding is off)."""
        if self.forwarding == "none":
            return gpu
        assert self.peers is not None
        node, local = divmod(gpu, self.gpus_per_node)
        return node * self.gpus_per_node + self.peers[local]

    def peer_array(self) -> list[int]:
        return [self.peer_of(g) for g in range(self.num_gpus)]

    def describe(self) -> str:
        return (
            f"{self.name}: {self.nodes} node(s) x {self.gpus_per_node} GPU(s), NVLink {self.nvlink_gbps:g} GB/s, "
            f"NIC {self.nic_gbps:g} GB/s per GPU ({self.transport}), {self.dma_queues} DMA queue(s) per GPU, "
            f"forwarding {self.forwarding}"
        )


# The presets, all bandwidths per GPU and direction, each with its source:
# - paper-h800: the HOCCL paper's testbed (8x H800 per node, 400 Gb/s = 50 GB/s NIC per GPU). NVLink is about
#   200 GB/s per direction: the H800's "400 GB/s" is its total of both directions, and the paper's own measured
#   peaks (192 GB/s P2P and AllGather) agree. (Until 2026-12-01 this preset had 400 per direction.)
# - dgx-h100: NVIDIA's DGX H100 datasheet (NVLink 4: 900 GB/s total, 450 per direction; 8x 400 Gb/s NICs).
# - h200x2: the 2x H200 machine we borrow, measured 2026-11-30 (DESIGN.md): 396 GB/s copy-engine P2P per
#   direction, and as its "NIC" (it has no RDMA NIC) the TCP transport's plain sockets over loopback, 8
#   connections, 1 GiB in 56.3-57.6 ms (docs/results/2026-11-30-s5, runs 4-5: 18.9 GB/s; it was 23.4 from an earlier,
#   shorter measurement until the cost model's calibration, 2026-12-01, found it 25% fast).
PRESETS: dict[str, dict[str, Any]] = {
    "paper-h800": dict(gpus_per_node=8, nvlink_gbps=200.0, nic_gbps=50.0, dma_queues=1, transport="verbs"),
    "dgx-h100": dict(gpus_per_node=8, nvlink_gbps=450.0, nic_gbps=50.0, dma_queues=1, transport="verbs"),
    "h200x2": dict(gpus_per_node=2, nvlink_gbps=396.0, nic_gbps=18.9, dma_queues=1, transport="tcp"),
}


def _build(fields: Mapping[str, Any], source: str) -> Topology:
    try:
        return Topology(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'topology'}: {err['msg']}" for err in exc.errors()
        )
        raise TopologyError(f"invalid topology from {source}: {problems}") from None


def make_topology(
    name: str,
    *,
    nodes: int = 1,
    gpus_per_node: int | None = None,
    forwarding: Forwarding | None = None,
    dma_queues: int | None = None,
    nvlink_gbps: float | None = None,
    nic_gbps: float | None = None,
    transport: str | None = None,
) -> Topology:
    """A preset scaled to ``nodes`` (and optionally ``gpus_per_node``), with optional overrides (``transport``: its
    host costs, TRANSPORT_COSTS)."""
    if name not in PRESETS:
        raise TopologyError(f"unknown topology preset {name!r}; choose one of {', '.join(sorted(PRESETS))} "
                            "or give a topology file")
    fields: dict[str, Any] = dict(PRESETS[name], name=name, nodes=nodes)
    for key, value in (("gpus_per_node", gpus_per_node), ("forwarding", forwarding), ("dma_queues", dma_queues),
                       ("nvlink_gbps", nvlink_gbps), ("nic_gbps", nic_gbps), ("transport", transport)):
        if value is not None:
            fields[key] = value
    return _build(fields, f"preset {name!r}")


MAX_TOPOLOGY_BYTES = 16 << 20  # a topology file larger than this is not one


def load_topology(path: str | Path, **overrides: Any) -> Topology:
    """Read a topology from a JSON or YAML file (the fields of :class:`Topology`)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:  # bounded: /dev/zero or a pipe that never ends is not a topology
            raw = fh.read(MAX_TOPOLOGY_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TopologyError(f"topology file {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): give a "
                            "JSON or YAML file") from None
    if len(raw) > MAX_TOPOLOGY_BYTES:
        raise TopologyError(f"topology file {path} is larger than {MAX_TOPOLOGY_BYTES} bytes: a topology is a few "
                            "fields (nodes, GPUs per node, bandwidths, peer map); is this the right file?")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # optional extra
        except ImportError:
            raise TopologyError(
                f"{path} is YAML but PyYAML is not installed; pip install 'hoccl[yaml]' or use JSON"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TopologyError(f"topology file {path} is not valid YAML: {exc}") from None
        except RecursionError:
            raise TopologyError(f"topology file {path} nests too deeply to be a topology") from None
        except ValueError as exc:  # an integer of more digits than Python converts (4300)
            raise TopologyError(f"topology file {path} holds a number too long to read ({exc}); no topology "
                                "field takes one") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TopologyError(f"topology file {path} is not valid JSON: {exc}") from None
        except RecursionError:
            raise TopologyError(f"topology file {path} nests too deeply to be a topology") from None
        except ValueError as exc:  # an integer of more digits than Python converts (4300)
            raise TopologyError(f"topology file {path} holds a number too long to read ({exc}); no topology "
                                "field takes one") from None
    if not isinstance(data, dict):
        raise TopologyError(f"topology file {path} must hold an object with the topology's fields, "
                            f"got {type(data).__name__}")
    if "schema_version" in data and "stages" in data:
        raise TopologyError(f"{path} is a HOCCL plan, not a topology file: give a preset "
                            f"({', '.join(sorted(PRESETS))}) or a file of the topology's fields (a plan holds its "
                            "own under \"topology\")")
    data.setdefault("name", path.stem)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return _build(data, str(path))
