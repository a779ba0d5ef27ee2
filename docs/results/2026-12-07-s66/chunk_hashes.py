"""sha256 of each plan of a grid compiled with --chunk auto by the checkout at sys.argv[1]."""
import hashlib, sys, json
sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[1] + "/examples")
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from workloads import zipf_matrix
out = {}
for topo_name in ("paper-h800", "dgx-h100", "h200x2"):
    for nodes in (1, 2, 4, 8):
        if topo_name == "h200x2" and nodes > 4:
            continue
        topo = make_topology(topo_name, nodes=nodes)
        G = topo.num_gpus
        for kind in ("alltoall", "allgather", "broadcast", "scatter", "gather", "alltoallv", "sendrecv"):
            for size in (1 << 20, 64 << 20, 1 << 30):
                for mc in (True, False):
                    if not mc and kind not in ("allgather", "broadcast"):
                        continue
                    if kind == "alltoallv":
                        spec = CollectiveSpec(kind="alltoallv", matrix=zipf_matrix(G, mean_pair_bytes=max(1, size // G), seed=G).tolist())
                    elif kind == "sendrecv":
                        spec = CollectiveSpec(kind="sendrecv", pairs=[[i, (i + 1) % G, size] for i in range(G)]) if G > 1 else None
                    else:
                        spec = CollectiveSpec(kind=kind, size_bytes=size, root=0 if kind in ("broadcast", "scatter", "gather") else None)
                    if spec is None:
                        continue
                    try:
                        plan = compile_plan(topo, spec, CompileOptions(multicast=mc))
                        h = hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:16]
                        h = f"{h} chunk {plan.options.chunk_bytes}"
                    except Exception as exc:
                        h = f"error {type(exc).__name__}: {exc}"[:120]
                    out[f"{topo_name} {nodes} {kind} {size} mc={mc}"] = h
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
print(len(out), "plans")
