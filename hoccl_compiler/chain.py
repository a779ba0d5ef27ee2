"""The stages as the runtimes run them, without a barrier: each queue's end from stage to stage
(:class:`StageChain`), the forwarding paths' edges between queues (:func:`pair_edges`) and the overlapped time
(:func:`overlapped_s`), with the grouped-array helpers the cost model v2 (:mod:`hoccl_compiler.cost`) shares."""

from __future__ import annotations

import numpy as np

__all__ = ["StageChain", "pair_edges", "overlapped_s", "shared_delay", "group_start", "run_start_of", "firsts"]


def firsts(keys: np.ndarray) -> np.ndarray:
    """For keys sorted ascending: True where a run of equal keys starts."""
    first = np.empty(keys.size, bool)
    if keys.size:
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return first


def run_start_of(first: np.ndarray) -> np.ndarray:
    """Each element's index of the start of its run (``first``: where runs start)."""
    idx = np.arange(first.size)
    return np.maximum.accumulate(np.where(first, idx, 0)) if first.size else idx


def group_start(keys: np.ndarray) -> np.ndarray:
    """For keys sorted ascending: each element's index minus the index where its run of equal keys starts."""
    return np.arange(keys.size) - run_start_of(firsts(keys))


def shared_delay(group: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """sum over the other members of each element's group of min(their bytes, its bytes). Members are taken by
    (group, bytes, index); one stable sort by group gives that order where the bytes already rise within every
    group (chunks of one size: the common case), else a second key is sorted too."""
    n = group.size
    out = np.zeros(n)
    if not n:
        return out
    if nbytes[0] == nbytes.min() == nbytes.max():  # every member one size (a large All-to-All's chunks): (size - 1) b
        # for each, in whatever order a sort leaves equal keys (the running sums below are whole numbers of bytes,
        # exact in float64 while all the members' bytes stay under 2**53, so the figure is the same to the bit)
        order = np.argsort(group)
        first = firsts(group[order])
        lengths = np.diff(np.r_[np.flatnonzero(first), n])
        del first
        out[order] = np.repeat(lengths - 1, lengths) * float(nbytes[0])
        return out
    # each temporary is as large as the group (3 M chunk entries at 1024 GPUs), so each goes once it is dead
    order = np.argsort(group, kind="stable")
    g, bi = group[order], nbytes[order]
    first = firsts(g)
    if not (bi[1:] >= bi[:-1])[~first[1:]].all():
        order = np.lexsort((nbytes, group))
        g, bi = group[order], nbytes[order]
        first = firsts(g)
    del g
    b = bi.astype(np.float64)
    del bi
    start_of = run_start_of(first)
    csum = np.cumsum(b)
    before = csum - b
    before -= np.where(start_of > 0, csum[start_of - 1], 0.0)  # smaller (or equal, earlier) members
    del csum
    lengths = np.diff(np.r_[np.flatnonzero(first), n])
    later = lengths[np.cumsum(first) - 1]  # the group's size, then less the member's rank and itself
    del first, lengths
    later -= np.arange(n) - start_of + 1
    del start_of
    before += later * b
    out[order] = before
    return out


class StageChain:
    """Each queue's end as the stages run on without a barrier (both runtimes): a queue starts a stage's work once
    it is through its previous stage's; the work of it that waits on a forwarding path (a piece whose chunks follow
    the chunks of the piece before it on the path) starts no earlier than that piece's queue started the stage and
    moved the path's first chunk, and ends no earlier than that plus the waiting pieces' time, nor than the piece's
    queue ended plus the waiting pieces' last chunks. The queue's other work does not wait (it runs while the path
    fills): a GPU's copy queue that forwards a block it receives and also copies its own block ends at its busy time
    where the network delivers in time, as the chunk simulation has it. Fed one stage at a time (:meth:`add`)."""

    def __init__(self, queues: int, hops: int = 3):
        self.end = np.zeros(queues)
        self.hops = hops  # the most pieces a path has after its first (send_forward -> rdma -> recv_forward: 2)

    def add(self, busy: np.ndarray, up: np.ndarray, down: np.ndarray, first: np.ndarray, last: np.ndarray,
            whole: np.ndarray) -> None:
        """One stage: ``busy[q]`` each queue's time in it; edges ``up[i] -> down[i]`` (the queues of a path's
        consecutive pieces), one per pair of queues (:func:`pair_edges`): the upstream pieces' longest first chunk,
        the downstream pieces' whole times summed (they run one after another on their queue), and their last
        chunks as :func:`pair_edges` adds them up."""
        begin = self.end.copy()
        ready = begin.copy()  # when the queue's work that waits on a path may start
        for _ in range(self.hops):
            np.maximum.at(ready, down, ready[up] + first)
        end = begin + busy[:begin.size]
        for _ in range(self.hops):
            np.maximum.at(end, down, np.maximum(ready[up] + first + whole, end[up] + last))
        self.end = np.where(busy[:begin.size] > 0, end, self.end)

    def add_pieces(self, busy: np.ndarray, piece: np.ndarray, queue: np.ndarray, up: np.ndarray, depth: np.ndarray,
                   first: np.ndarray, tail: np.ndarray, whole: np.ndarray, scratch: tuple[np.ndarray, np.ndarray],
                   done: np.ndarray | None = None, ports: tuple[np.ndarray, ...] | None = None,
                   lead: np.ndarray | None = None) -> None:
        """One stage, as :meth:`add` but piece by piece along the paths: ``piece`` (global indices of the stage's
        waiting pieces, by ``depth`` along their paths, rising), ``up`` the piece each waits on and ``tail`` the
        last chunks of the pieces of its queue that follow that piece (its own and theirs, summed); ``queue``,
        ``first`` and ``whole`` per global piece; ``scratch``: two arrays of the pieces' size, reused from stage to
        stage; ``done`` per global piece, its queue's time in the stage through its last chunk in the chunk order
        (None: the queue's whole busy time).

        A waiting piece is released once the piece it follows has moved its first chunk (a piece that waits on
        nothing: when its queue starts the stage), and ends no earlier than its release plus its time, nor than
        that piece's end plus the last chunks of the pieces of its queue that follow the same piece (a block
        forwarded to several GPUs: they follow its last chunk one after another); a piece that waits on nothing
        ends with its turn in its queue (``done``: a queue that takes the parts other nodes wait for before one they
        do not is through with those early). A queue ends no earlier than its start plus its busy time, than any of
        its pieces, nor than any release plus the waiting pieces released then or later (a queue's makespan with
        release times). Where a queue forwards pieces that come in at different times (a node of two trees of a
        Broadcast takes one half of the parts early and the other late), :meth:`add`'s one release and one end per
        queue (its latest upstream's) would hold back all of its waiting work, and add up the last chunks round a
        node's ring once per hop of the deepest path.

        ``ports``: (out port, bytes, out-port bandwidth) per global piece (port -1 where it shares with no other
        queue), or None. Where waiting pieces released at one moment on one port sit on several queues, those
        queues share the port (:func:`_released_together`): a block forwarded whole to several GPUs (one chunk each)
        and dealt over several DMA queues ends no sooner than the port moves all of it, not at the port's full
        bandwidth on every queue. Pieces of one queue run one after another anyway (the makespan above).

        ``lead`` (per global piece, or None: ``first`` of the piece it follows): how long the piece a waiting piece
        follows takes to bring the waiting piece's first chunk, where their chunks differ in size (a network transfer
        in chunks of its own)."""
        begin = self.end.copy()
        end = begin + busy[:begin.size]
        if piece.size:
            release, finish = scratch
            q_up = queue[up]
            release[up] = begin[q_up]  # pieces that wait on nothing: their queue's start, and their turn's end
            finish[up] = end[q_up] if done is None else begin[q_up] + done[up]
            q = queue[piece]
            levels = [(depth == d) for d in np.unique(depth)]
            for sel in levels:
                at, u = piece[sel], up[sel]
                release[at] = np.maximum(begin[q[sel]], release[u] + (first[u] if lead is None else lead[at]))
            for sel in levels:
                at, u = piece[sel], up[sel]
                finish[at] = np.maximum(release[at] + whole[at], finish[u] + tail[sel])
            np.maximum.at(end, q, finish[piece])
            if ports is not None:
                np.maximum.at(end, *_released_together(release[piece], piece, queue, whole, *ports))
            r, w = release[piece], whole[piece]
            order = np.lexsort((-r, q))  # per queue, the latest release first
            q, r, w = q[order], r[order], w[order]
            starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
            csum = np.cumsum(w)
            before = np.repeat(np.r_[0.0, csum[starts[1:] - 1]], np.diff(np.r_[starts, q.size]))
            np.maximum.at(end, q, r + csum - before)  # released at r or later: all of it after r
        self.end = np.where(busy[:begin.size] > 0, end, self.end)

    def time_s(self) -> float:
        return float(self.end.max(initial=0.0))


def _released_together(release: np.ndarray, piece: np.ndarray, queue: np.ndarray, whole: np.ndarray,
                       out_port: np.ndarray, nbytes: np.ndarray, out_cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where waiting pieces (global indices ``piece``, released at ``release``) released at one moment (to the
    nanosecond) on one out-port sit on several queues (a GPU's DMA queues), the queues share the port max-min fairly,
    as the chunk simulation has it: each queue's share of them (its pieces one after another: their whole times,
    and L bytes) ends no sooner than the moment plus its whole times plus min(L, L') / bandwidth for every other
    queue's share L'. Returns (queue, that end) per such share; pieces of port -1 share nothing."""
    p = out_port[piece]
    use = np.flatnonzero(p >= 0)
    if not use.size:
        return np.zeros(0, np.int64), np.zeros(0)
    _, moment = np.unique(np.round(release[use] * 1e9).astype(np.int64), return_inverse=True)
    q = queue[piece[use]]
    width = int(q.max()) + 1
    keys, share = np.unique((moment.astype(np.int64) * (int(p.max()) + 1) + p[use]) * width + q,
                            return_inverse=True)  # (moment, port, queue)
    group = keys // width  # (moment, port)
    if np.unique(group).size == keys.size:
        return np.zeros(0, np.int64), np.zeros(0)  # no moment and port with more than one queue
    load = np.bincount(share, weights=nbytes[piece[use]].astype(np.float64), minlength=keys.size)
    own = np.bincount(share, weights=whole[piece[use]], minlength=keys.size)
    first = np.zeros(keys.size, np.int64)
    first[share] = use  # a piece of each share (its place in ``piece``), for its moment and its port's bandwidth
    return keys % width, release[first] + own + shared_delay(group, load) / out_cap[piece[first]]


def pair_edges(up: np.ndarray, down: np.ndarray, first: np.ndarray, last: np.ndarray, whole: np.ndarray,
               source: np.ndarray | None = None, early: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """A stage's path edges (per waiting piece: upstream queue, downstream queue, the upstream piece's first chunk
    s, the waiting piece's last chunk s and whole time s; ``source``: the upstream piece) as one edge per pair of
    queues: the longest first chunk and the waiting pieces' whole times summed; their last chunks summed over the
    pieces that wait on one upstream piece (a block forwarded to several GPUs: all of them follow its last chunk),
    the most of those sums over the upstream pieces (pieces that wait on different ones, as round a ring, follow
    each its own), less how long before its queue's end the upstream piece is through (``early``, per edge: its
    turn in the chunk order, :class:`StageChain`'s ``done``)."""
    if not up.size:
        return up, down, first, last, whole
    width = int(max(up.max(), down.max())) + 1
    keys, inverse = np.unique(up * width + down, return_inverse=True)
    f = np.zeros(keys.size)
    np.maximum.at(f, inverse, first)
    wh = np.bincount(inverse, weights=whole, minlength=keys.size)
    if source is None:
        la = np.bincount(inverse, weights=last, minlength=keys.size)
    else:
        groups, at = np.unique(inverse * (int(source.max()) + 1) + source, return_inverse=True)
        per_source = np.bincount(at, weights=last, minlength=groups.size)
        if early is not None:
            lead = np.zeros(groups.size)
            np.maximum.at(lead, at, early)
            per_source -= lead
        la = np.full(keys.size, -np.inf)
        np.maximum.at(la, groups // (int(source.max()) + 1), per_source)
    return keys // width, keys % width, f, la, wh


def overlapped_s(port_busy_s: np.ndarray, queue_busy_s: np.ndarray, pipeline_s: np.ndarray,
                 chain_s: float = 0.0) -> float:
    """The stages' time as the runtimes run them, without a barrier between stages: every port and every queue
    goes on to its next stage's work as soon as its own part of a stage is done (and the paths let it:
    ``chain_s``, :class:`StageChain`), so the stages last as long as the busiest port or queue is busy over all of
    them, or the chain of queues, or the longest forwarding path within a stage: at least the longest stage."""
    return max(float(port_busy_s.max(initial=0.0)), float(queue_busy_s.max(initial=0.0)),
               float(np.max(pipeline_s, initial=0.0)), chain_s)
