"""Pass 1: the origin traffic matrix C and its flows, exactly what the user asked."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..collective import layout
from ..ir import CompileOptions, CompileState


def run(state: CompileState, options: CompileOptions) -> CompileState:
    G = state.topology.num_gpus
    lay = layout(state.collective, G)
    origin = np.zeros((G, G), dtype=np.int64)
    np.add.at(origin, (lay.src, lay.dst), lay.bytes)
    return dataclasses.replace(state, layout=lay, origin=origin)
