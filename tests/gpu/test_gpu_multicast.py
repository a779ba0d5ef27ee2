"""Multicast plans on hoccl_runtime.execute on a real GPU (ranks share GPU 0 where there is one): a broadcast's
chain, each copy reading what the one before it wrote, chunk after chunk, with CUDA events between the copy
streams. Fresh random data, poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("sync", ["events", "flags"])
@pytest.mark.parametrize("gpus,root,in_place", [(4, 0, False), (4, 2, True), (8, 5, False)])
def test_a_broadcast_chain_on_copy_engines(gpus, root, in_place, sync):
    import cupy as cp

    import hoccl_runtime as hr

    n_dev = cp.cuda.runtime.getDeviceCount()
    size = (24 << 20) + 4099  # chunks of 1 MiB and a ragged tail
    plan = compile_plan(make_topology("h200x2", nodes=1, gpus_per_node=gpus),
                        CollectiveSpec(kind="broadcast", size_bytes=size, root=root, in_place=in_place),
                        CompileOptions(chunk_bytes=1 << 20, baselines=False))
    assert plan.options.multicast and sum(v >= 0 for v in plan.flows.via) == gpus - 2
    rng = np.random.default_rng([gpus, root, int(in_place)])
    for rep in range(2):  # the second call replays the cached launch list with its events
        data = rng.integers(0, 256, size, dtype=np.uint8)
        bufs, streams = {}, {}
        for r in range(gpus):
            with cp.cuda.Device(r % n_dev):
                out = cp.full(size, 0xA5, dtype=cp.uint8)
                inp = None
                if r == root:
                    if in_place:
                        out[:] = cp.asarray(data)
                    else:
                        inp = cp.asarray(data)
                bufs[r] = (inp, out)
                streams[r] = cp.cuda.Stream(non_blocking=True)
        for d in range(min(n_dev, gpus)):
            cp.cuda.Device(d).synchronize()
        hr.execute(plan, bufs, streams, sync=sync)
        for r in range(gpus):
            with cp.cuda.Device(r % n_dev):
                streams[r].synchronize()
                got = cp.asnumpy(bufs[r][1])
            assert np.array_equal(got, data), (rep, r, int(np.count_nonzero(got != data)))
