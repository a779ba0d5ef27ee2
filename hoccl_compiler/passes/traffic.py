"""Pass 1: the origin traffic matrix C and its flows: exactly what the user asked, routed for multicast where the
options ask for it and it changes the plan (:mod:`hoccl_compiler.multicast`; C stays the unicast one)."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import multicast
from ..collective import layout
from ..ir import CompileOptions, CompileState


def run(state: CompileState, options: CompileOptions) -> CompileState:
    G = state.topology.num_gpus
    lay = layout(state.collective, G)
    origin = np.zeros((G, G), dtype=np.int64)
    np.add.at(origin, (lay.src, lay.dst), lay.bytes)
    if options.multicast:
        lay = multicast.route(state.collective, state.topology, lay, trees=options.net_chunk_bytes is None)
    return dataclasses.replace(state, layout=lay, origin=origin)
