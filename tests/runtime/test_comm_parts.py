"""The intra-node Communicator's parts on their own, each built without the communicator (docs/architecture.md):
the node context's checks, the peer mappings' pins beside the LRU, and the launch builder's paced launches, whose
pacing feedback travels in the build context."""

from __future__ import annotations

import contextlib
import types

import pytest

from hoccl_runtime.comm import context as context_mod
from hoccl_runtime.comm import rendezvous
from hoccl_runtime.comm.build import LaunchBuilder
from hoccl_runtime.comm.context import NodeContext
from hoccl_runtime.errors import HocclError
from hoccl_runtime.launch import Call, Memcpy


@pytest.mark.parametrize("args, match", [
    ((2, 2, 0), "rank 2 is outside 0..1"),
    ((-1, 2, 0), "rank -1 is outside 0..1"),
    ((0, 4, 0, 3), "with 3 GPUs per node: the world must be whole nodes"),
    ((0, 2, -1), "device=-1: give the index of a GPU"),
    ((0, 2, "0"), "device='0': give the index of a GPU"),
])
def test_the_node_context_refuses_bad_arguments_by_name(args, match):
    rank, world, device, *per_node = args
    with pytest.raises(HocclError, match=match):
        NodeContext.make(rank, world, device, None, 60.0, *per_node)


def test_the_node_context_places_the_rank():
    ctx = NodeContext.make(5, 8, 1, None, 30, gpus_per_node=4)
    assert (ctx.node, ctx.local, ctx.nodes, ctx.device, ctx.timeout_s) == (1, 1, 2, 1, 30.0)
    assert NodeContext.make(1, 2, 0, None, 5).nodes == 1  # one node by default
    with pytest.raises(HocclError, match="timeout_s=0"):
        NodeContext.make(0, 2, 0, None, 0)


def test_a_partner_that_never_writes_its_key_times_out_naming_it(monkeypatch):
    ctx = NodeContext.make(0, 2, 0, types.SimpleNamespace(), 0.05)
    seen = {}

    def wait_for_key(store, key, world, timeout_s, prefix, who, watch, late, poll_s):
        seen.update(key=key, timeout=timeout_s, late=late)
        raise HocclError(late)

    monkeypatch.setattr(context_mod, "wait_for_key", wait_for_key)
    with pytest.raises(HocclError, match="rank 1 did not register window 3 within 0 s .*is it alive, set up alike"):
        ctx.store_get("window/3/1", 1, "register window 3", hint="set up alike")
    assert seen["key"] == "window/3/1" and seen["timeout"] == 0.05


def test_peer_mappings_pin_what_a_window_holds_beside_the_lru(monkeypatch):
    """A handle a call mapped moves to the pins when a window takes it (mapped once); two windows on one
    allocation share one mapping, closed when the last lets go; the LRU's mappings close at close_all."""
    opened, closed = [], []
    monkeypatch.setattr(rendezvous, "ipc_open_mem_handle", lambda h: opened.append(h) or 0x1000 * len(opened))
    monkeypatch.setattr(rendezvous, "ipc_close_mem_handle", closed.append)
    monkeypatch.setattr(rendezvous._cuda, "on_device", lambda device: contextlib.nullcontext())
    from hoccl_runtime import ipc

    monkeypatch.setattr(ipc, "ipc_open_mem_handle", lambda h: opened.append(h) or 0x1000 * len(opened))
    monkeypatch.setattr(ipc, "ipc_close_mem_handle", closed.append)
    monkeypatch.setattr(ipc._cuda, "on_device", lambda device: contextlib.nullcontext())
    m = rendezvous.PeerMappings(0, 0, limit=4)
    a = m.open(b"A")                     # a call maps A
    assert m.pin(b"A") == a and m.pin(b"A") == a and opened == [b"A"]  # two windows take it over: no new mapping
    assert m.open(b"A") == a and b"A" not in m.lru
    b = m.pin(b"B")                      # a window's own mapping
    m.unpin(b"A")
    assert closed == []                  # one window still holds A
    m.unpin(b"A")
    assert closed == [a]
    m.open(b"C")
    m.close_all()
    assert sorted(closed) == sorted([a, b, 0x3000]) and not m.pinned and not len(m.lru)


def test_a_paced_launch_keeps_its_feedback_in_its_context():
    """LaunchBuilder.run for a paced call builds its list in a context whose pacing sleeps are its entry's
    Feedback (one per launch entry, kept with it), not one per list."""
    shared = types.SimpleNamespace(flag_address=lambda i: 0x1000 + 4 * i)
    lb = LaunchBuilder(0, 2, 0, shared, pace_period_us=250.0)
    lb.pacer = types.SimpleNamespace(handle=77, sleep=lambda stream, us: None, sleep_us=lambda us: us)
    ids: dict = {}
    lb.event = lambda key: ids.setdefault(key, 100 + len(ids))
    built = []

    def build(stream, rate, ctx):
        ops = ctx.paced([Memcpy(0x10, 0x20, 3 << 20, stream)], rate, stream)
        built.append(ops)
        return ops

    import hoccl_runtime.comm.build as build_mod

    ran = []
    real = build_mod.compile_launch
    build_mod.compile_launch = lambda ops: (lambda: ran.append(len(ops)))
    try:
        lb.run(("k",), build, 5, 1e-3)
        lb.run(("k",), build, 5, 1e-3)  # cached: built once
    finally:
        build_mod.compile_launch = real
    assert len(built) == 1 and len(ran) == 2
    entry = lb.launches.hit(("k",))
    sleeps = [op for op in built[0] if isinstance(op, Call)]
    assert sleeps and all(op.fn == entry.feedback.sleep for op in sleeps)
    assert entry.feedback.target_us == pytest.approx((3 << 20) / (1e-3 * 1e3))
