"""The communicator's cross-process protocol, simulated on the CPU for 2-4 ranks.

Each rank's launch lists come from the real ``Communicator._build`` (CUDA stubbed out: streams,
events and flags are numbers). A scheduler then runs every rank's streams in random interleavings
with the semantics the GPU gives them: stream order, ``cuStreamWaitValue32`` (EQ) / write on shared
host flags, event record/wait (a wait binds to the last record enqueued before it), copies. It checks
that nothing deadlocks, that a copy into rank v's output runs after v's stream reached the call and
before v's work after the call, that a copy reads its source rank's input within the same window, and
that every flag is back to 0 after each sequence (replay-safe handshakes).
"""

from __future__ import annotations

import random
import types

import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.comm import Communicator
from hoccl_runtime.interop import DeviceBuffer

OUT, IN = 1 << 40, 1 << 39  # rank r's output at r << 40 (mapped at the same address everywhere), input + IN


class _Shared:
    def flag_address(self, index: int) -> int:
        return 0x1000 + 4 * index


def fake_comm(rank: int, world: int, local_copies: str = "sm") -> Communicator:
    c = object.__new__(Communicator)
    c.rank, c.world, c.device, c.eager_bytes = rank, world, rank, 0  # rendezvous (eager: eager_comm below)
    c.eager_collectives, c.local_copies = False, local_copies
    c._shared, c._by_id = _Shared(), {}
    c._pacer = types.SimpleNamespace(handle=900 + rank, sleep=lambda stream, us: None, sleep_us=lambda period: 0)
    c.pace_period_us = 250.0
    c._building = None  # no paced launch being made (Communicator._cached_paced)
    ids: dict = {}
    c._event = lambda key: ids.setdefault(("event", rank, key), 10_000 * (rank + 1) + len(ids))
    c._side_stream = lambda slot: 100 + 10 * rank + slot
    return c


def plan_for(world: int, spec: CollectiveSpec):
    return compile_plan(make_topology("h200x2", nodes=1, gpus_per_node=world, dma_queues=1), spec,
                        CompileOptions(chunk_bytes=1 << 40, baselines=False))


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

    def enqueue(self, rank: int, call: int, ops: list[tuple], user: int) -> None:
        self._mark(user, ("work", rank, call))
        for op in ops:
            kind = op[0]
            if kind == "copy":
                self._op(op[4], (*op, call))
            elif kind == "record":
                self._op(op[2], op)
            elif kind == "wait":
                self._op(op[1], op)
            elif kind == "memops":
                for m in op[1].ops:
                    self._op(op[2], ("memop", *m))
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
            self.copies.append((call, dst // OUT, (src - IN) // OUT, set(self.done)))
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
           (CollectiveSpec(kind="allgather", size_bytes=world * (5 << 19)), everyone)]
    return seq + seq  # twice: the flags must be reusable


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", [None, 1e-3])  # 1e-3 GB/s: every copy cut into 1 MiB pieces on clock ticks
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_protocol_orders_copies_and_never_deadlocks(world, seed, rate, local_copies):
    """... also when each rank's own block is copied by the next rank (local_copies="peer"): that copy reads
    and writes the helped rank's buffers inside the helped rank's window, and no rank copies its own block."""
    comms = [fake_comm(r, world, local_copies) for r in range(world)]
    sim = Sim(world, seed)
    for call, (spec, ranks) in enumerate(calls_for(world)):
        plan = plan_for(world, spec)
        for r in sorted(ranks):
            c = comms[r]
            state = c._make_state(plan)
            need_in, need_out = plan.ranks.input_bytes[r], plan.ranks.output_bytes[r]
            inp = DeviceBuffer(r * OUT + IN, need_in, r) if need_in else None
            out = DeviceBuffer(r * OUT, need_out, r) if need_out else None
            if inp is None and state.resident[1] and out is not None:  # in place (broadcast)
                inp = DeviceBuffer(r * OUT + IN + state.resident[0], state.resident[1], r)
            remote = {p: p * OUT for p in state.partners}
            helped_in = state.helped * OUT + IN if state.helped is not None else None
            user = 50 + r
            ops = c._build(state, inp, out, remote, user, rate, helped_in)
            own = [op for op in ops if op[0] == "copy" and op[1] // OUT == r == (op[2] - IN) // OUT]
            assert not own or local_copies == "sm", f"rank {r} copies its own block: {own}"
            sim.enqueue(r, call, ops, user)
    sim.run()
    sim.check()
    if local_copies == "peer":  # every own block moved, by the rank before it
        assert {(d, s) for _, d, s, _ in sim.copies if d == s} == {(r, r) for r in range(world)}
    moved = {(d, s) for _, d, s, _ in sim.copies}
    assert {(d, s) for d in range(world) for s in range(world) if d != s} <= moved  # all-to-all traffic ran


def test_a_missing_partner_is_a_deadlock_the_simulation_sees():
    """The check can fail: rank 1 never issues its half of a send, so rank 0's stream must wait forever."""
    comms = [fake_comm(r, 2) for r in range(2)]
    plan = plan_for(2, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 10),)))
    state = comms[0]._make_state(plan)
    sim = Sim(2, 0)
    sim.enqueue(0, 0, comms[0]._build(state, DeviceBuffer(IN, 10, 0), None, {1: OUT}, 50), 50)
    with pytest.raises(AssertionError, match="deadlock"):
        sim.run()


# --- eager send/recv: staging slots and FULL flags, with memory contents modelled -------------------------
STAGE = 1 << 45  # staging of messages a -> b at STAGE + (a * world + b) << 32


def eager_comm(rank: int, world: int, eager: int = 1 << 20) -> Communicator:
    c = fake_comm(rank, world)
    c.eager_bytes, c._seq, c.eager_collectives = eager, [0] * world, True  # (fake_comm: rendezvous)
    c._stage_in = {p: STAGE + ((p * world + rank) << 32) for p in range(world)}
    c._stage_out = {p: STAGE + ((rank * world + p) << 32) for p in range(world)}
    return c


class MemSim:
    """Streams of ops run in random interleavings; copies move tokens between addresses; "store" and
    "expect" ops stand for the user's work before and after a call on its stream."""

    def __init__(self, seed: int):
        self.rng, self.streams, self.flags, self.mem = random.Random(seed), {}, {}, {}
        self.bad: list[str] = []

    def add(self, stream: int, ops: list[tuple]) -> None:
        q = self.streams.setdefault(stream, [])
        for op in ops:
            if op[0] == "memops":
                q += [("memop", *m) for m in op[1].ops]
            else:
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
            state = c._make_state(plan)
            peer = dst if me == src else src
            c._seq[peer] += 1
            slots = {peer: c._seq[peer] % 4}
            user, buf = 50 + me, OUT * (me + 1)
            if me == src:
                ops = [("store", buf, ("msg", k))] + \
                    c._eager_ops(state.eager, DeviceBuffer(buf, n, me), None, slots, user) + \
                    [("store", buf, "reused by the sender")]
            else:
                ops = c._eager_ops(state.eager, None, DeviceBuffer(buf, n, me), slots, user) + \
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
    real = Communicator._eager_ops

    def no_wait(self, *args, **kw):  # drop the batch that waits for the slots to be empty (value 0)
        return [op for op in real(self, *args, **kw)
                if not (op[0] == "memops" and all(k == "wait_eq" and v == 0 for k, _, v in op[1].ops))]

    def caught(seed: int) -> bool:
        try:
            return bool(eager_run(seed, messages=12, one_pair=True).bad)
        except AssertionError:  # a deadlock: a FULL written twice, the second message's wait never ends
            return True

    monkeypatch.setattr(Communicator, "_eager_ops", no_wait)
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
            state = c._make_state(plan)
            assert state.eager is not None
            user, inp, out = 50 + r, DeviceBuffer(r * OUT + IN, world * n, r), DeviceBuffer(r * OUT, world * n, r)
            slots = {}
            for p in state.partners:
                c._seq[p] += 1
                slots[p] = c._seq[p] % 4
            # my input: one token per piece source (AllGather: one piece; All-to-All: one per destination)
            stores = [("store", inp.ptr + k * n, ("in", r, call, k)) for k in range(world)]
            expects = []
            for src in range(world):  # what I must hold after the call
                k = 0 if spec.kind == "allgather" else r
                expects.append(("expect", out.ptr + src * n, ("in", src, call, k), f"call {call} {spec.kind} "
                                f"piece {src}->{r}"))
            sim.add(user, stores + c._eager_ops(state.eager, inp, out, slots, user) + expects +
                    [("store", out.ptr + src * n, "reused") for src in range(world)])
    sim.run()
    assert sim.bad == []
    assert all(v == 0 for v in sim.flags.values()), sim.flags


def test_the_watchdog_writes_the_flags_a_dead_rank_would_have_written():
    """_drain (rank 2 of 3 died): my streams' waits on it are released, READY/DONE and eager FULL flags at the
    addresses the launch lists wait on (the same index functions), and no flag of a live pair is touched."""
    import numpy as np

    world, me, dead = 3, 0, 2
    c = fake_comm(me, world)
    c._shared.flags = flags = np.full((2 + 4) * world * world, 7, np.int32)  # 7: untouched
    c._events, rounds = {"call": 1}, iter([True, False])
    c._pending = lambda: next(rounds)
    c._drain(dead)
    at = {(addr - 0x1000) // 4: v for addr, v in [
        (c._flag(0, me, dead).address, 1), (c._flag(1, dead, me).address, 1),
        (c._flag(0, dead, me).address, 0), (c._flag(1, me, dead).address, 0),
        *[(c._slot_flag(dead, me, j).address, 1) for j in range(4)],
        *[(c._slot_flag(me, dead, j).address, 0) for j in range(4)]]}
    assert {i: int(v) for i, v in enumerate(flags) if v != 7} == at
