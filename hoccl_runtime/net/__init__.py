"""The inter-node path: the node executors (:mod:`hoccl_runtime.net.executor`: one process per node replays a
plan's network part, on host buffers or on GPUs through pinned staging rings) and the transports under them
(:mod:`hoccl_runtime.net.transport`: TCP, RDMA verbs through pyverbs). The communicators that drive them from
torch-like calls are in :mod:`hoccl_runtime.comm` (``net``: one GPU per node, ``nodenet``: node leaders).
Importing this package loads no CUDA and no pyverbs."""
