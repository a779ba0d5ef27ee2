"""Session 67: sha256 of skewed and sparse All-to-Allv plans (every one through the general peel and fewer_stages),
compiled by the checkout at sys.argv[1], written to sys.argv[2]: Zipf(1.1) on 16-256 GPUs of paper-h800 and dgx-h100
with --max-extra-time 0, 0.01, 0.05 and auto, the same with the host's costs at 0, and random sparse matrices."""
import hashlib
import json
import sys
import time

import numpy as np

sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[1] + "/examples")
from workloads import zipf_matrix  # noqa: E402

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

ZERO = dict(call_us=0.0, net_call_us=0.0, net_flow_us=0.0, net_node_flow_us=0.0, stage_sync_us=0.0,
            net_staging_gbps=0.0)
out, t0 = {}, time.time()
for preset in ("paper-h800", "dgx-h100"):
    for G in (16, 64, 256):
        for host in ("costs", "zero"):
            topo = make_topology(preset, nodes=G // 8)
            if host == "zero":
                topo = topo.model_copy(update={"costs": topo.costs.model_copy(update=ZERO)})
            mats = {"zipf": zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G)}
            rng = np.random.default_rng(G)
            for density in (0.05, 0.3):
                m = rng.integers(1, 64 << 20, size=(G, G)) * (rng.random((G, G)) < density)
                np.fill_diagonal(m, 0)
                mats[f"sparse{density}"] = m
            for name, mat in mats.items():
                if host == "zero" and G > 64 and name == "zipf":
                    continue  # the whole peel: minutes
                spec = CollectiveSpec(kind="alltoallv", matrix=mat.tolist())
                for extra in (0.0, 0.01, 0.05, None):
                    plan = compile_plan(topo, spec, CompileOptions(max_extra_time=extra, baselines=False))
                    h = hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:16]
                    out[f"{preset} {G} {host} {name} extra={extra}"] = f"{h} stages {len(plan.stages)}"
with open(sys.argv[2], "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
print(len(out), "plans", round(time.time() - t0, 1), "s")
