"""Session 49 (the CPU VM): compile a dgx-h100 Broadcast of 1 GiB from GPU 0 with its parts down one chain of nodes
on every rail ("chain": multicast.TREE_NODES raised past the node count) or down the two trees of nodes (today's
default from 3 nodes, "trees"), with an optional chunk size. Read with session 45's netchunk.py, which cuts the
network transfers into pieces M times smaller than the copies (netpieces.txt).
Usage: python mk.py NODES OUT.json chain|trees [CHUNK_BYTES]"""
import sys

import hoccl_compiler.multicast as mc
from hoccl_compiler import compile_plan, make_topology, save_plan
from hoccl_compiler.collective import CollectiveSpec
from hoccl_compiler.pipeline import CompileOptions

nodes, out, trees = int(sys.argv[1]), sys.argv[2], sys.argv[3] == 'trees'
if not trees:
    mc.TREE_NODES = 10**6
kw = dict(chunk_bytes=int(sys.argv[4])) if len(sys.argv) > 4 else {}
p = compile_plan(make_topology('dgx-h100', nodes=nodes), CollectiveSpec(kind='broadcast', size_bytes=1 << 30, root=0),
                 CompileOptions(**kw))
save_plan(p, out)
print(out, p.options.chunk_bytes)
