"""Session 52 (arithmetic, the CPU VM): issue 35's multicast AllGather on a topology's port model, the least time a plan
can take when each block crosses between nodes once per node, with and without intra-node bytes sent through the
NICs (GPU -> its NIC -> the fabric -> another GPU's NIC of the same node: not cross-node RDMA bytes, which stay
(N - 1) S). Per GPU (all alike), block b: NVLink in = (G - 1) b - NIC in; NIC in >= (N - 1) b (the remote blocks);
without loop-back NIC in = (N - 1) b exactly; each port moves at most its bandwidth x T, each way (in = out by
symmetry). The collective bound is the issue's: max((G - 1) b / (NVLink + NIC), (G - L) b / (L NIC)).
Also the Broadcast's root node (:func:`broadcast_root_node`)."""
from hoccl_compiler import PRESETS


def allgather(nv, nic, L, N, loop):
    G = N * L
    bound = max((G - 1) / (nv + nic), (G - L) / (L * nic))
    if not loop:
        t = max((G - 1 - (N - 1)) / nv, (N - 1) / nic)
    else:  # NIC in = y >= N - 1: T = max((G - 1 - y) / nv, y / nic), balanced at y = (G - 1) nic / (nv + nic)
        y = max(N - 1, (G - 1) * nic / (nv + nic))
        t = max((G - 1 - y) / nv, y / nic)
    return t / bound


def broadcast_root_node(nv, nic, L, loop):
    """The root's node, S = 1: its L - 1 other GPUs take S each, through NVLink (at most nv T each) and, with
    loop-back, Y bytes in all through their NICs (at most nic T each); its L NICs send S out of the node once plus
    the Y looped back (at most L nic T). The least T (a linear program in T and Y), over the collective bound."""
    from scipy.optimize import linprog

    bound = max(1 / (nv + nic), 1 / (L * nic))
    # x = (T, Y): minimize T subject to
    #   (L - 1) - Y <= (L - 1) nv T;  Y <= (L - 1) nic T;  1 + Y <= L nic T;  Y = 0 without loop-back
    a = [[-(L - 1) * nv, -1], [-(L - 1) * nic, 1], [-L * nic, 1]]
    b = [-(L - 1), 0, -1]
    res = linprog([1, 0], A_ub=a, b_ub=b, bounds=[(0, None), (0, None if loop else 0)])
    return res.x[0] / bound


for name in ("paper-h800", "dgx-h100"):
    p = PRESETS[name]
    nv, nic, L = p["nvlink_gbps"], p["nic_gbps"], p["gpus_per_node"]
    print(f"{name}: NVLink {nv:g} GB/s, NIC {nic:g} GB/s, {L} GPUs a node; least plan time / collective bound")
    for N in (2, 4, 16):
        print(f"  AllGather on {N:2d} nodes: once per node {allgather(nv, nic, L, N, False):.3f}, "
              f"with intra-node bytes through the NICs {allgather(nv, nic, L, N, True):.3f}")
    print(f"  Broadcast, the root's node: {broadcast_root_node(nv, nic, L, False):.3f}, with intra-node bytes "
          f"through the NICs {broadcast_root_node(nv, nic, L, True):.3f}")
