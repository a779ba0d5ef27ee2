"""The communicator's cross-process protocol, simulated on the CPU for 2-4 ranks.

Each rank's launch lists come from the real ``LaunchBuilder.build`` (CUDA stubbed out: streams,
events and flags are numbers). A scheduler then runs every rank's streams in random interleavings
with the semantics the GPU gives them: stream order, ``cuStreamWaitValue32`` (EQ) / write on shared
host flags, event record/wait (a wait binds to the last record enqueued before it), copies. It checks
that nothing deadlocks, that a copy into rank v's output runs after v's stream reached the call and
before v's work after the call, that a copy reads its source rank's input within the same window, and
that every flag is back to 0 after each sequence (replay-safe handshakes). Copies move real bytes: every
output must equal the reference executor's (``hoccl_compiler.verify.replay``) and no input is written.
"""

from __future__ import annotations

import os
import random
import types

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.verify import replay
from hoccl_runtime.comm.build import LaunchBuilder
from hoccl_runtime.comm.eager import EagerSlots, eager_ops
from hoccl_runtime.comm.intranode import plan_state
from hoccl_runtime.interop import DeviceBuffer
from hoccl_runtime.launch import Memcpy, Memops, Record, Wait

OUT, IN, CALL = 1 << 40, 1 << 39, 1 << 32  # rank r's output for call k at r * OUT + k * CALL, its input + IN


def where(address: int) -> tuple[int, bool, int, int]:
    """(rank, is input, call, offset) of a simulated buffer address."""
    rank, rest = divmod(address, OUT)
    is_input = rest >= IN
    call, offset = divmod(rest - IN if is_input else rest, CALL)
    return rank, is_input, call, offset


class _Shared:
    flags = None

    def flag_address(self, index: int) -> int:
        return 0x1000 + 4 * index


class FakeRank:
    """What the simulation needs of one rank, from the Communicator's own parts with CUDA stubbed out: its plans'
    states (``plan_state``, as Communicator._make_state makes them) and its launch lists (the real
    ``LaunchBuilder.build`` and ``eager_ops``; streams, events and flags are numbers)."""

    def __init__(self, rank: int, world: int, local_copies: str = "sm", eager_bytes: int = 0):
        self.rank, self.world, self.local_copies, self.eager_bytes = rank, world, local_copies, eager_bytes
        self.seq = [0] * world
        self.launcher = LaunchBuilder(rank, world, rank, _Shared(), pace_period_us=250.0)
        self.launcher.pacer = types.SimpleNamespace(handle=900 + rank, sleep=lambda stream, us: None,
                                                    sleep_us=lambda period: 0)
        ids: dict = {}
        self.launcher.event = lambda key: ids.setdefault(("event", rank, key), 10_000 * (rank + 1) + len(ids))
        self.launcher.side_stream = lambda slot: 100 + 10 * rank + slot
        # the eager part without a store or mailbox: its slot flags and staging addresses only
        self.eager = EagerSlots(rank, world, rank, None, self.launcher.shared, None, eager_bytes, None)

    def make_state(self, plan):
        return plan_state(plan, self.rank, self.world, self.local_copies,
                          self.eager_bytes if plan.collective.kind == "sendrecv" or self.eager_bytes else None)

    def build(self, state, inp, out, remote, user, rate=None, helped_in=None):
        return self.launcher.build(self.launcher.context(), state, inp, out, remote, user, rate, helped_in)

    def flag(self, phase, a, b):
        return self.launcher.flag(phase, a, b)

    def slot_flag(self, a, b, j):
        return self.eager.slot_flag(a, b, j)

    def eager_ops(self, e, inp, out, slots, s, rate=None):
        """What EagerSlots.launch builds for the call (the same context)."""
        return eager_ops(self.eager.context(self.launcher.context()), e, inp, out, slots, s, rate)


def fake_comm(rank: int, world: int, local_copies: str = "sm") -> FakeRank:
    return FakeRank(rank, world, local_copies)  # rendezvous (eager: eager_comm below)


def plan_for(world: int, spec: CollectiveSpec, dma_queues: int = 1, chunk_bytes: int = 1 << 40):
    return compile_plan(make_topology("h200x2", nodes=1, gpus_per_node=world, dma_queues=dma_queues), spec,
                        CompileOptions(chunk_bytes=chunk_bytes, baselines=False, multicast=False))


def run_streams(streams: dict[int, list], rng: random.Random, step) -> None:
    """Run the streams' queues in a random interleaving: each turn the head of some stream whose head can
    run (``step(head)`` runs it and says True) is popped; when no head can run, that is a deadlock."""
    while any(streams.values()):
        ready = [s for s, q in streams.items() if q]
        rng.shuffle(ready)
        for s in ready:
            if step(streams[s][0]):
                streams[s].pop(0)
                break
        else:
            raise AssertionError(f"deadlock: every stream waits: {({s: q[0] for s, q in streams.items() if q})}")


class Sim:
    def __init__(self, world: int, seed: int):
        self.world, self.rng = world, random.Random(seed)
        self.streams: dict[int, list] = {}
        self.flags: dict[int, int] = {}
        self.last_record: dict[int, list] = {}
        self.done: set[int] = set()      # ids of executed ops
        self.copies: list[tuple[int, int, int, set]] = []  # (call, dst rank, src rank, done-set snapshot)
        self.mem: dict[tuple[int, bool, int], np.ndarray] = {}  # (rank, is input, call) -> bytes
        self.bad: list[str] = []
        self.marks: dict[tuple, int] = {}
        self._next = 0

    def _op(self, stream: int, op: tuple) -> None:
        self._next += 1
        entry = [self._next, op]
        if op[0] == "record":
            self.last_record[op[1]] = entry
        if op[0] == "wait":  # binds to the last record of that event enqueued so far
            rec = self.last_record.get(op[2])
            entry.append(rec[0] if rec else None)
        self.streams.setdefault(stream, []).append(entry)

    def enqueue(self, rank: int, call: int, ops: list, user: int) -> None:
        """A rank's launch list (hoccl_runtime.launch ops) onto the simulated streams, as tuples this simulation
        interprets: ("copy", dst, src, n, stream, call), ("record", event, stream), ("wait", stream, event),
        ("memop", kind, address, value); the rest (device switches, pacing sleeps) does nothing here."""
        self._mark(user, ("work", rank, call))
        for op in ops:
            if isinstance(op, Memcpy):
                self._op(op.stream, ("copy", op.dst, op.src, op.nbytes, op.stream, call))
            elif isinstance(op, Record):
                self._op(op.stream, ("record", op.event, op.stream))
            elif isinstance(op, Wait):
                self._op(op.stream, ("wait", op.stream, op.event))
            elif isinstance(op, Memops):
                for m in op.batch.ops:
                    self._op(op.stream, ("memop", *m))
        self._mark(user, ("after", rank, call))

    def _mark(self, stream: int, key: tuple) -> None:
        self._next += 1
        self.marks[key] = self._next
        self.streams.setdefault(stream, []).append([self._next, ("mark", key)])

    def _try(self, entry: list) -> bool:
        op = entry[1]
        kind = op[0]
        if kind == "memop":
            _, what, address, value = op
            if what == "wait_eq":
                return self.flags.get(address, 0) == value
            self.flags[address] = value
        elif kind == "wait":
            return entry[2] is None or entry[2] in self.done
        elif kind == "copy":
            _, dst, src, n, _, call = op
            (d, d_in, d_call, d_off), (r, r_in, r_call, r_off) = where(dst), where(src)
            if d_in:
                self.bad.append(f"call {call}: a copy of {n} bytes wrote rank {d}'s input")
            else:
                self.mem[(d, False, d_call)][d_off:d_off + n] = self.mem[(r, r_in, r_call)][r_off:r_off + n]
            self.copies.append((call, d, r, set(self.done)))
        return True

    def run(self) -> None:
        def step(head: list) -> bool:
            if not self._try(head):
                return False
            self.done.add(head[0])
            return True

        run_streams(self.streams, self.rng, step)

    def check(self) -> None:
        for call, dst, src, done in self.copies:
            for rank in {dst, src}:
                what = f"call {call}: copy {src}->{dst}"
                assert self.marks[("work", rank, call)] in done, f"{what} ran before rank {rank} was ready"
                assert self.marks[("after", rank, call)] not in done, f"{what} ran after rank {rank} went on"
        assert all(v == 0 for v in self.flags.values()), f"flags left set: {self.flags}"
        assert not self.bad, self.bad


def calls_for(world: int) -> list[tuple[CollectiveSpec, set[int]]]:
    """A sequence of collectives (and which ranks take part)."""
    everyone = set(range(world))
    seq = [(CollectiveSpec(kind="allgather", size_bytes=world * 1000), everyone),
           (CollectiveSpec(kind="alltoall", size_bytes=world * 1000), everyone),
           (CollectiveSpec(kind="broadcast", size_bytes=999, root=world - 1, in_place=True), everyone),
           (CollectiveSpec(kind="scatter", size_bytes=world * 100, root=0), everyone),
           (CollectiveSpec(kind="gather", size_bytes=world * 100, root=world - 1), everyone),
           (CollectiveSpec(kind="sendrecv", pairs=((0, 1, 4096),)), {0, 1}),
           (CollectiveSpec(kind="sendrecv", pairs=((1, 0, 100),)), {0, 1}),
           (CollectiveSpec(kind="sendrecv", pairs=((world - 1, 0, 77),)), {0, world - 1}),
           # large enough to be cut into several 1 MiB pieces when paced
           (CollectiveSpec(kind="sendrecv", pairs=((1, 0, (3 << 20) + 5),)), {0, 1}),
           (CollectiveSpec(kind="allgather", size_bytes=world * (5 << 19)), everyone),
           # uneven: own blocks larger than some ranks' sends (peer mode: through several regions, or the
           # next rank's copy when the sends are too small)
           (CollectiveSpec(kind="alltoallv", matrix=tuple(tuple(100 * (i + 1) if i == j else 37 * (j + 1) + i
                                                                for j in range(world)) for i in range(world))),
            everyone)]
    return seq + seq  # twice: the flags must be reusable


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", [None, 1e-3])  # 1e-3 GB/s: every copy cut into 1 MiB pieces on clock ticks
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_protocol_orders_copies_and_never_deadlocks(world, seed, rate, local_copies, dma_queues=1, chunk=1 << 40):
    """... and delivers every collective's bytes, also when each rank's own block goes through a peer GPU
    (local_copies="peer": read back from a peer's output, through a region of it that a later send
    overwrites, or copied by the next rank): then no copy has its source and destination on one GPU."""
    comms = [fake_comm(r, world, local_copies) for r in range(world)]
    sim = Sim(world, seed)
    rng = np.random.default_rng(seed)
    expected = {}
    for call, (spec, ranks) in enumerate(calls_for(world)):
        plan = plan_for(world, spec, dma_queues, chunk)
        inputs = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
        want = replay(plan, inputs).outputs
        for r in sorted(ranks):
            c = comms[r]
            state = c.make_state(plan)
            need_in, need_out = plan.ranks.input_bytes[r], plan.ranks.output_bytes[r]
            base = r * OUT + call * CALL
            sim.mem[(r, True, call)] = inputs[r]
            sim.mem[(r, False, call)] = np.full(need_out, 0xA5, dtype=np.uint8)  # poisoned
            inp = DeviceBuffer(base + IN, need_in, r) if need_in else None
            out = DeviceBuffer(base, need_out, r) if need_out else None
            at, n = state.resident
            if n and out is not None:  # in place (broadcast): the input sits in the output
                inp = DeviceBuffer(base + at, n, r)
                sim.mem[(r, False, call)][at:at + n] = want[r][at:at + n]
            remote = {p: p * OUT + call * CALL for p in state.partners}
            helped_in = state.helped * OUT + call * CALL + IN if state.helped is not None else None
            user = 50 + r
            ops = c.build(state, inp, out, remote, user, rate, helped_in)
            own = [op for op in ops if isinstance(op, Memcpy) and where(op.dst)[0] == where(op.src)[0] == r]
            assert not own or local_copies == "sm", f"rank {r} makes a same-GPU copy: {own}"
            sim.enqueue(r, call, ops, user)
            expected[(r, call)] = want[r]
    sim.run()
    sim.check()
    for (r, call), want in expected.items():
        got = sim.mem[(r, False, call)]
        kind = calls_for(world)[call][0].kind
        assert np.array_equal(got, want), f"call {call} ({kind}): rank {r}'s output differs at " \
                                          f"{np.flatnonzero(got != want)[:5]}"
    moved = {(d, s) for _, d, s, _ in sim.copies}
    assert {(d, s) for d in range(world) for s in range(world) if d != s} <= moved  # all-to-all traffic ran


@pytest.mark.parametrize("dma_queues", [2, 3])
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_protocol_with_several_dma_queues_and_small_chunks(dma_queues, local_copies):
    """4 ranks whose peers are spread over several copy queues (side streams), with 64 KiB chunks
    interleaved per queue: a peer-mode own block is read back from, or passed through, the first queue's
    send pieces only, and every output is still right."""
    for seed in range(2):
        test_protocol_orders_copies_and_never_deadlocks(4, seed, None, local_copies, dma_queues, 64 << 10)
    if local_copies == "peer":  # the 2.5 MiB own block's 40 pieces of 64 KiB travel as one copy each way
        for kind in ("allgather", "alltoall"):
            plan = plan_for(4, CollectiveSpec(kind=kind, size_bytes=4 * (5 << 19)), dma_queues, 64 << 10)
            bounce = fake_comm(0, 4, "peer").make_state(plan).bounce
            assert [(b.peer, b.nbytes, b.temp) for b in bounce] == [(1, 5 << 19, kind == "alltoall")]


def test_the_simulation_sees_wrong_bytes():
    """The data check can fail: rank 0's own-block read-back aimed one byte off gives rank 0 wrong bytes."""
    comms = [fake_comm(r, 2, "peer") for r in range(2)]
    plan = plan_for(2, CollectiveSpec(kind="allgather", size_bytes=2000))
    states = [c.make_state(plan) for c in comms]
    assert [b.temp for b in states[0].bounce] == [False]  # read back from where the send to rank 1 put it
    sim, inputs = Sim(2, 0), [np.arange(1000, dtype=np.uint8) + r for r in range(2)]
    for r in range(2):
        sim.mem[(r, True, 0)], sim.mem[(r, False, 0)] = inputs[r], np.zeros(2000, dtype=np.uint8)
        ops = comms[r].build(states[r], DeviceBuffer(r * OUT + IN, 1000, r), DeviceBuffer(r * OUT, 2000, r),
                              {1 - r: (1 - r) * OUT}, 50 + r)
        if r == 0:
            ops = [Memcpy(op.dst, op.src + 1, op.nbytes, op.stream) if isinstance(op, Memcpy) and where(op.src)[0] == 1
                   else op for op in ops]
        sim.enqueue(r, 0, ops, 50 + r)
    sim.run()
    sim.check()
    want = np.concatenate(inputs)
    assert np.array_equal(sim.mem[(1, False, 0)], want)
    assert not np.array_equal(sim.mem[(0, False, 0)], want)


def test_uneven_own_blocks_take_several_regions_or_the_next_rank():
    """alltoallv on 4 ranks, own block of rank r 100 * (r + 1) bytes, sends 37 * (dst + 1) + r bytes: rank 0's
    100 go through the regions of its sends to ranks 1 and 2 (74 + 26 bytes); rank 3's 400 do not fit in its
    sends (40 + 77 + 114 bytes): the next rank copies them."""
    world = 4
    matrix = tuple(tuple(100 * (i + 1) if i == j else 37 * (j + 1) + i for j in range(world)) for i in range(world))
    plan = plan_for(world, CollectiveSpec(kind="alltoallv", matrix=matrix))
    states = [fake_comm(r, world, "peer").make_state(plan) for r in range(world)]
    pieces = {r: [(b.peer, b.nbytes) for b in st.bounce] for r, st in enumerate(states)}
    assert pieces[0] == [(1, 74), (2, 26)]  # through the regions of its sends to 1, then to 2
    assert sum(n for _, n in pieces[1]) == 200 and len(pieces[1]) > 1
    assert pieces[3] == [] and states[3].helper == 0 and states[0].helped == 3


@pytest.mark.parametrize("kind", ["allgather", "alltoall", "scatter", "gather", "broadcast"])
def test_peer_routes_for_each_collective(kind):
    """Which route each collective's own block takes with local_copies="peer" on 3 ranks."""
    world = 3
    root = {"scatter": 0, "gather": 2, "broadcast": 1}.get(kind)
    spec = CollectiveSpec(kind=kind, size_bytes=world * 100, **({} if root is None else {"root": root}))
    plan = plan_for(world, spec)
    states = [fake_comm(r, world, "peer").make_state(plan) for r in range(world)]
    routes = {r: {b.temp for b in st.bounce} for r, st in enumerate(states)}
    helpers = {r: (st.helper, st.helped) for r, st in enumerate(states)}
    if kind == "allgather":  # read back from the next rank's output, after the send there
        assert routes == {r: {False} for r in range(world)}
        assert all(st.bounce[0].peer == (r + 1) % world for r, st in enumerate(states))
    elif kind == "alltoall":
        assert routes == {r: {True} for r in range(world)}
    elif kind == "scatter":  # only the root has an own block and sends
        assert routes == {0: {True}, 1: set(), 2: set()}
    elif kind == "broadcast":  # out of place: the root's own copy reads back what it sent
        assert routes == {0: set(), 1: {False}, 2: set()}
    if kind == "gather":  # the root sends nothing: the next rank copies its block
        assert routes == {r: set() for r in range(world)}
        assert helpers == {0: (None, 2), 1: (None, None), 2: (0, None)}
    else:
        assert helpers == {r: (None, None) for r in range(world)}


def test_a_missing_partner_is_a_deadlock_the_simulation_sees():
    """The check can fail: rank 1 never issues its half of a send, so rank 0's stream must wait forever."""
    comms = [fake_comm(r, 2) for r in range(2)]
    plan = plan_for(2, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 10),)))
    state = comms[0].make_state(plan)
    sim = Sim(2, 0)
    sim.enqueue(0, 0, comms[0].build(state, DeviceBuffer(IN, 10, 0), None, {1: OUT}, 50), 50)
    with pytest.raises(AssertionError, match="deadlock"):
        sim.run()


# --- eager send/recv: staging slots and FULL flags, with memory contents modelled -------------------------
STAGE = 1 << 45  # staging of messages a -> b at STAGE + (a * world + b) << 32


def eager_comm(rank: int, world: int, eager: int = 1 << 20) -> FakeRank:
    c = FakeRank(rank, world, eager_bytes=eager)  # collectives eager too
    c.eager.stage_in = {p: STAGE + ((p * world + rank) << 32) for p in range(world)}
    c.eager.stage_out = {p: STAGE + ((rank * world + p) << 32) for p in range(world)}
    return c


class MemSim:
    """Streams of ops run in random interleavings; copies move tokens between addresses; "store" and
    "expect" ops stand for the user's work before and after a call on its stream."""

    def __init__(self, seed: int):
        self.rng, self.streams, self.flags, self.mem = random.Random(seed), {}, {}, {}
        self.bad: list[str] = []

    def add(self, stream: int, ops: list) -> None:
        """Launch ops (hoccl_runtime.launch) and this simulation's own ("store", ...) / ("expect", ...) tuples."""
        q = self.streams.setdefault(stream, [])
        for op in ops:
            if isinstance(op, Memops):
                q += [("memop", *m) for m in op.batch.ops]
            elif isinstance(op, Memcpy):
                q.append(("copy", op.dst, op.src))
            elif isinstance(op, tuple):
                q.append(op)

    def _try(self, op: tuple) -> bool:
        if op[0] == "memop":
            if op[1] == "wait_eq":
                return self.flags.get(op[2], 0) == op[3]
            self.flags[op[2]] = op[3]
        elif op[0] == "copy":
            self.mem[op[1]] = self.mem.get(op[2])
        elif op[0] == "store":
            self.mem[op[1]] = op[2]
        elif op[0] == "expect" and self.mem.get(op[1]) != op[2]:
            self.bad.append(f"{op[3]}: found {self.mem.get(op[1])}, expected {op[2]}")
        return True

    def run(self) -> None:
        run_streams(self.streams, self.rng, self._try)


def eager_run(seed: int, world: int = 3, messages: int = 14, one_pair: bool = False) -> MemSim:
    """Random messages among ranks, each rank's buffers reused for every message (the hard case for
    staging slots); every rank issues its calls in the same per-pair order."""
    rng = random.Random(seed + 100)
    comms = [eager_comm(r, world) for r in range(world)]
    sim = MemSim(seed)
    for k in range(messages):
        src = 0 if one_pair else rng.randrange(world)
        dst = 1 if one_pair else rng.choice([r for r in range(world) if r != src])
        n = rng.choice([1, 4096, 1 << 20])
        plan = plan_for(world, CollectiveSpec(kind="sendrecv", pairs=((src, dst, n),)))
        for me in (src, dst):
            c = comms[me]
            state = c.make_state(plan)
            peer = dst if me == src else src
            c.seq[peer] += 1
            slots = {peer: c.seq[peer] % 4}
            user, buf = 50 + me, OUT * (me + 1)
            if me == src:
                ops = [("store", buf, ("msg", k))] + \
                    c.eager_ops(state.eager, DeviceBuffer(buf, n, me), None, slots, user) + \
                    [("store", buf, "reused by the sender")]
            else:
                ops = c.eager_ops(state.eager, None, DeviceBuffer(buf, n, me), slots, user) + \
                    [("expect", buf, ("msg", k), f"message {k} {src}->{dst}"), ("store", buf, "reused")]
            sim.add(user, ops)
    sim.run()
    return sim


@pytest.mark.parametrize("seed", range(6))
def test_eager_messages_land_in_order_without_deadlock(seed):
    sim = eager_run(seed)
    assert sim.bad == []
    assert all(v == 0 for v in sim.flags.values()), sim.flags


def test_eager_without_the_senders_slot_wait_is_caught(monkeypatch):
    """The check can fail: a sender that does not wait for its slot to be emptied overwrites messages."""
    real = FakeRank.eager_ops

    def no_wait(self, *args, **kw):  # drop the batch that waits for the slots to be empty (value 0)
        return [op for op in real(self, *args, **kw)
                if not (isinstance(op, Memops) and all(k == "wait_eq" and v == 0 for k, _, v in op.batch.ops))]

    def caught(seed: int) -> bool:
        try:
            return bool(eager_run(seed, messages=12, one_pair=True).bad)
        except AssertionError:  # a deadlock: a FULL written twice, the second message's wait never ends
            return True

    monkeypatch.setattr(FakeRank, "eager_ops", no_wait)
    assert any(caught(seed) for seed in range(10))
    monkeypatch.undo()
    assert not any(caught(seed) for seed in range(10))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_eager_collectives_move_every_piece(world, seed):
    """Small AllGathers and All-to-Alls, repeated on the same buffers (more calls than slots), on the eager
    path: every piece a rank receives is the one its peer wrote for that call."""
    comms = [eager_comm(r, world) for r in range(world)]
    sim, n = MemSim(seed), 1000
    specs = [CollectiveSpec(kind="allgather", size_bytes=world * n), CollectiveSpec(kind="alltoall",
                                                                                    size_bytes=world * n)]
    for call in range(10):
        spec = specs[call % 2]
        plan = plan_for(world, spec)
        for r in range(world):
            c = comms[r]
            state = c.make_state(plan)
            assert state.eager is not None
            user, inp, out = 50 + r, DeviceBuffer(r * OUT + IN, world * n, r), DeviceBuffer(r * OUT, world * n, r)
            slots = {}
            for p in state.partners:
                c.seq[p] += 1
                slots[p] = c.seq[p] % 4
            # my input: one token per piece source (AllGather: one piece; All-to-All: one per destination)
            stores = [("store", inp.ptr + k * n, ("in", r, call, k)) for k in range(world)]
            expects = []
            for src in range(world):  # what I must hold after the call
                k = 0 if spec.kind == "allgather" else r
                expects.append(("expect", out.ptr + src * n, ("in", src, call, k), f"call {call} {spec.kind} "
                                f"piece {src}->{r}"))
            sim.add(user, stores + c.eager_ops(state.eager, inp, out, slots, user) + expects +
                    [("store", out.ptr + src * n, "reused") for src in range(world)])
    sim.run()
    assert sim.bad == []
    assert all(v == 0 for v in sim.flags.values()), sim.flags


def test_the_watchdog_writes_the_flags_a_dead_rank_would_have_written():
    """_drain (rank 2 of 3 died): my streams' waits on it are released, READY/DONE and eager FULL flags at the
    addresses the launch lists wait on (the same index functions), and no flag of a live pair is touched."""
    import numpy as np

    world, me, dead = 3, 0, 2
    from hoccl_runtime.comm.watchdog import Watchdog

    c = fake_comm(me, world)
    c.launcher.shared.flags = flags = np.full((2 + 4) * world * world, 7, np.int32)  # 7: untouched
    rounds = iter([True, False])
    watchdog = Watchdog(me, world, c.launcher.shared, {"call": 1}, start=False)
    watchdog.pending = lambda: next(rounds)
    watchdog.drain(dead)
    at = {(addr - 0x1000) // 4: v for addr, v in [
        (c.flag(0, me, dead).address, 1), (c.flag(1, dead, me).address, 1),
        (c.flag(0, dead, me).address, 0), (c.flag(1, me, dead).address, 0),
        *[(c.slot_flag(dead, me, j).address, 1) for j in range(4)],
        *[(c.slot_flag(me, dead, j).address, 0) for j in range(4)]]}
    assert {i: int(v) for i, v in enumerate(flags) if v != 7} == at


def test_a_refused_call_is_skipped_by_the_partners_that_come_after_and_fails_those_that_made_it():
    """Refusable calls (All-to-Allv) through the node's shared memory (issue 36, item 4): where every rank
    refuses, or a partner comes to the call after a rank refused it, the call is skipped everywhere (the partner
    raises a CollectiveError naming the refusing rank and its reason) and nothing fails, also for more refusals
    than the ring holds; a partner that made the call already is failed by its watchdog (naming the rank and the
    reason, its waits on it released), and marks itself failed, so the refusing rank's watchdog fails too."""
    from hoccl_runtime.comm._base import REFUSAL_BYTES
    from hoccl_runtime.comm.watchdog import _RING_LEN, Watchdog
    from hoccl_runtime.errors import CollectiveError

    world = 2
    shared = types.SimpleNamespace(pids=np.array([os.getpid()] * world, np.int64),
                                   refusals=np.zeros(world * REFUSAL_BYTES, np.uint8))
    w0, w1 = (Watchdog(r, world, shared, {}, start=False) for r in range(world))
    drained = {0: [], 1: []}
    for r, w in ((0, w0), (1, w1)):
        w.drain = lambda peer, limit_s=5.0, r=r: drained[r].append(peer)

    def watch(w):  # one round of the thread's loop, by hand
        rounds = iter([False, True])
        w._stop.wait = lambda s: next(rounds)
        w._watch()

    for _ in range(_RING_LEN + 3):  # every rank refuses: nothing fails
        for w in (w0, w1):
            w.refuse(w.next_call(), "CollectiveError: bad sizes everywhere")
    watch(w0)
    watch(w1)
    assert w0.failure is None and w1.failure is None and w0.next_call() == w1.next_call() == _RING_LEN + 4

    k = w1.next_call()  # rank 1 refuses, rank 0 comes after: it skips the call too
    w1.refuse(k, "CollectiveError: input_split_sizes [4, 5] add up to 9 " + "x" * 600)
    with pytest.raises(CollectiveError, match=rf"rank 0: rank 1 refused All-to-Allv call {k} \(CollectiveError: "
                                              r"input_split_sizes \[4, 5\] add up to 9 x+\); this call moves nothing"):
        w0.make(w0.next_call())
    watch(w0)
    watch(w1)
    assert w0.failure is None and w1.failure is None and w0.next_call() == w1.next_call() == k + 1
    assert len(w1.refusal(1).encode()) < REFUSAL_BYTES  # a long reason is cut to its record

    w0.make(k + 1)  # rank 0 made the call; rank 1 then refuses it: rank 0 waits in vain
    w1.make(k + 1)
    w0.make(k + 2)
    w1.refuse(k + 2, "BufferError: output is torch.float32, input torch.float64")
    watch(w1)
    assert w1.failure is None  # rank 0 did nothing wrong, nor failed yet
    watch(w0)
    assert drained == {0: [1], 1: []}
    with pytest.raises(CollectiveError, match=rf"rank 1 refused All-to-Allv call {k + 2}, which rank 0 made "
                                              r"\(BufferError: output is torch.float32.*unusable"):
        w0.raise_if_failed()
    watch(w1)
    assert drained == {0: [1], 1: [0]}
    with pytest.raises(CollectiveError, match=r"rank 0's communicator failed \(a call it made was refused"):
        w1.make(w1.next_call())
