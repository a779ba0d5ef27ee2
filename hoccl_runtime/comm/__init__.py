"""One process per GPU (torchrun): the communicator with torch-like calls, for ranks of one node.

    comm = hoccl_runtime.init()                      # RANK / WORLD_SIZE / LOCAL_RANK + a store
    comm.all_gather_into_tensor(out, inp, stream=s)  # returns at once; `out` is ready for later work on s
    comm.close()

How a call works, for rank ``me`` (every step costs no SM, but one: a copy within one GPU, which the
CUDA driver runs as a kernel of its own; see step 3):

1. The plan for (collective, sizes) comes from a cache (compiled on first use, a few ms).
2. Buffer addresses are exchanged with each partner rank (unless the buffer is in a registered window:
   item 8) through a mailbox in host memory shared by the node's processes: my output's CUDA IPC handle
   (of its whole allocation) and the offset in it. The host waits for the partner's entry of the same
   call, up to ``timeout_s``: the CPU-side rendezvous of the paper's point-to-point executor. A partner
   that never arrives raises :class:`HocclTimeoutError` naming it; a partner that called another
   collective raises :class:`PlanError`. Opened IPC mappings are cached by handle (the least recently
   used of more than ``ipc_cache`` is closed).
3. Copies are pushed by their source GPU (``cudaMemcpyAsync``, a copy engine, into the peer's output
   through its IPC mapping). The first DMA queue of this rank runs on the caller's stream itself; local
   copies and any further DMA queues run on side streams ordered with it by CUDA events. A local copy
   (my own block of an out-of-place AllGather, All-to-All, scatter or gather) is a same-GPU copy, which
   the driver runs on SMs (measured, driver 580: hoccl_bench.smfree). None is made in place (input =
   my own block of the output: NCCL's in-place AllGather). With ``local_copies="peer"`` my own block
   goes through a peer GPU on copy engines instead (:func:`bounce_route`): read back from where my
   send put it (AllGather, broadcast), or pushed into a region of a peer's output that my send will
   overwrite and read back before that send (All-to-All, scatter); a block no send of mine carries
   (a gather's root) is copied by the next rank, from my input to my output over NVLink.
4. Streams of different processes are ordered with stream memory operations on flags in the shared
   host memory: per directed pair (u -> v), READY (v's stream says its output may be written) and DONE
   (u's stream says its copies into v landed), each a replay-safe handshake (wait for the reset value,
   write; the consumer waits for the value, resets it), batched so that a call costs two
   ``cuStreamBatchMemOp`` plus its copies::

       v's stream  ─[work]─ [READY=1 ...........................] [wait DONE==1, DONE=0] ─[work]─▶
       u's stream  ─[work]─ [wait READY==1, READY=0] ─[copy u -> v]─ [DONE=1] ─[work]─▶

   No host thread is in the loop once the call has returned, and a CUDA graph that captured a call
   replays it (every rank captures its part and launches its graph as often as the others).
   A call's CUDA work (the handshakes and copies for these buffers and streams) is cached; from the
   ``graph_after``-th call with the same buffers on, it is captured once into a CUDA graph and each
   call launches that graph: one driver call instead of one per copy, handshake and event (a
   ``cudaMemcpyAsync`` alone costs about 7 us of host time on the H200 machine, a graph launch of a
   whole call about as much). The call's trailing batch of stream memory operations (the DONE
   handshake, an eager slot's FULL or EMPTY write) is captured in the graph too; with
   ``graph_tail_direct`` (HOCCL_GRAPH_TAIL_DIRECT=1) the graph ends at the copies and that batch is
   launched after it; inside is the default, as whole calls took less host time that way (the
   measurements: docs/architecture.md).
5. A watchdog thread (it sleeps, and checks every 100 ms that the partner processes live) notices a
   partner that died while this rank's streams wait on it: it writes the flags the dead rank would
   have written so the streams drain instead of waiting forever, and every later call (and
   ``synchronize``) raises :class:`TransportError` naming the dead rank.
6. ``rate_gbps=`` (per call, or ``comm.rate_gbps`` for all) caps the rate of this rank's DMA queue:
   see :mod:`hoccl_runtime.pacing`. ``duration_s=`` (per call) spreads the call over that long instead:
   the rate is this rank's bytes to its peers over the duration (background traffic only has to
   finish inside the compute window beside it).
7. Small send/recv (up to ``eager_bytes``, 4 MiB unless HOCCL_EAGER_BYTES says otherwise, 0 with
   ``local_copies="peer"``; 0 turns it off) take an eager path instead: the sender's copy lands in one
   of ``EAGER_SLOTS`` staging slots that the receiver allocated for it once (exchanged through the store
   at the pair's first eager message), and the receiver's stream copies it out, with one flag per slot
   (FULL: the sender's stream waits for 0, copies, writes 1; the receiver's waits for 1, copies out, writes 0). Neither
   host waits for the other, no IPC handle moves per call, and on the GPUs the sender runs up to
   ``EAGER_SLOTS`` messages ahead: the rendezvous's two cross-GPU flag round trips per message
   (about 8 us each on the H200 pair, examples/handshake_latency.py) leave the critical path.
   It costs a second, local copy on the receiver. Sizes are checked through a small ring in the
   mailbox when the sender's entry is there in time (a mismatch raises PlanError on the receiver, at
   the call or at a later one or synchronize()).
   ``eager_collectives`` (HOCCL_EAGER_COLLECTIVES=1; off by default) puts small collectives on the
   same path. Off by default because, measured on the 2x H200, a collective that the user captured
   into a CUDA graph reuses one slot on every replay and waits a flag round trip per call (2 MiB
   AllGather 64 vs 116 GB/s), and a mismatched collective is then caught on one rank only.
8. Registered windows (:meth:`Communicator.register_window`, collective): a call whose buffer lies in one
   skips step 2's exchange. Its partners' buffers sit at the same offset of their windows (mapped once,
   at registration); the call writes its mailbox entry and does not wait for theirs, which it checks
   when they are there (a mismatch raises PlanError on both ranks; an entry already replaced by a later
   one, 4 calls on, goes unchecked). The host waits only where its slot still holds its own rendezvous
   entry that the partner has not read.
9. A communicator's calls run one after the other on the GPU whatever their streams (they share the
   flags of step 4 and the eager slots): a call on another stream than the previous one waits for the
   previous one's end event, as NCCL orders a communicator's calls.
10. Under CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting) every stream of the process shares one hardware
   queue, where step 3's same-GPU copy (a kernel) waits behind compute issued before it; copy-engine copies
   and stream memory operations do not (measured: in-place AllGathers delivered 365 GB/s beside a GEMM loop
   issued before or after them, NCCL 17 GB/s or nothing). The first call that makes such a copy warns once
   (RuntimeWarning) with the in-place form and ``local_copies="peer"``.
"""

from __future__ import annotations

from ._base import (  # noqa: F401 - the names tests and tools read
    _PAIR_BYTES,
    _RING,
    _SLOT_WORDS,
    _SLOTS,
    EAGER_SLOTS,
    MAX_QUEUES,
    _EagerLayout,
    _PlanState,
)
from .intranode import Communicator
from .windows import Window

__all__ = ["Communicator", "Window"]
