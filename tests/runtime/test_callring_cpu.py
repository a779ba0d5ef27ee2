"""The call ring (hoccl_runtime/net/callring.py): the queue in shared memory that carries every message from the
training process to its network proxy process."""

from __future__ import annotations

import os
import random
import threading

import numpy as np
import pytest

from hoccl_runtime.errors import HocclError, HocclTimeoutError
from hoccl_runtime.net.callring import CallRing, ring_bytes


def _ring(data_bytes: int) -> CallRing:
    return CallRing(np.zeros(ring_bytes(data_bytes), np.uint8))


def test_messages_come_out_whole_and_in_order_across_the_end_of_the_ring_many_times():
    ring, rng = _ring(61), random.Random(5)  # an odd size: lengths and bodies split at every position
    sent, got = [], []
    for _ in range(3000):
        if rng.random() < 0.55:
            msg = os.urandom(rng.randrange(0, 40))
            try:
                ring.put(msg, timeout_s=0.0)
                sent.append(msg)
            except HocclTimeoutError:
                pass  # full: the reader takes first
        else:
            got.append(ring.take())
    while (m := ring.take()) is not None:
        got.append(m)
    assert [m for m in got if m is not None] == sent and len(sent) > 1000
    assert int(ring._written[0]) > 100 * ring.size  # the counters went round the data many times


def test_a_writer_and_a_reader_in_two_threads_lose_and_reorder_nothing():
    ring, rng = _ring(256), random.Random(7)
    sent = [bytes([i % 251]) * rng.randrange(1, 120) for i in range(5000)]
    writer = threading.Thread(target=lambda: [ring.put(m, timeout_s=10.0) for m in sent])
    writer.start()
    got = []
    while len(got) < len(sent):
        m = ring.take()
        if m is not None:
            got.append(m)
    writer.join(10)
    assert got == sent and ring.take() is None


def test_a_full_ring_waits_then_times_out_naming_the_ring_and_a_dead_reader_is_raised_while_waiting():
    ring = _ring(64)
    ring.put(b"x" * 50, timeout_s=0.0)
    with pytest.raises(HocclTimeoutError, match="call ring \\(64 bytes\\) was full"):
        ring.put(b"y" * 20, timeout_s=0.05)

    class Gone(Exception):
        pass

    def alive():
        raise Gone

    with pytest.raises(Gone):
        ring.put(b"y" * 20, timeout_s=5.0, alive=alive)
    assert ring.take() == b"x" * 50  # nothing half-written was left behind
    ring.put(b"y" * 20, timeout_s=0.0)
    assert ring.take() == b"y" * 20 and ring.take() is None


def test_a_message_larger_than_the_ring_is_refused_with_the_fix():
    ring = _ring(64)
    with pytest.raises(HocclError, match="100 bytes does not fit .* HOCCL_NET_CHUNK_BYTES"):
        ring.put(b"z" * 100, timeout_s=1.0)
    with pytest.raises(HocclError, match="more than 128 bytes"):
        CallRing(np.zeros(100, np.uint8))
