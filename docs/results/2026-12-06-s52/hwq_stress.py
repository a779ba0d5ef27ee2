"""Session 52 (the CPU VM): a reproducer. tests/runtime/test_hw_queues_cpu.py's broadcast case (3 nodes of 2 GPUs,
256 KiB network chunks, 4 ring slots, one fake hardware queue a node) run REPS times with fresh data, to be run as 3-4
copies at once (the VM's 2 cores contended): about 1 run in 20 gives wrong bytes, and once the test itself hit its
10 s no-progress timeout in a contended CI run. Every failure: one 256 KiB network chunk of part 1 wrong in node 1
(and one or two in node 2, downstream), holding the data of the chunk 4 earlier (the same ring slot's previous
use), not poison. Never seen with 64 slots, without queue sharing (HWQ=none), or for the AllGather (0 of 40 each);
HOCCL_NET_LAND_GATES=0 and HOCCL_TCP_DIRECT_BYTES=0 fail the same way; the Python lanes
(HOCCL_TCP_ENGINE=thread) did not in 180 runs, nor the same Broadcast unicast (multicast=False) or with whole network
chunks (net_chunk_bytes=None) in 80 each. Usage (from the repository root, copied under tests/runtime/ so that its
fixtures resolve): HWQ=1 REPS=20 python -m pytest -q -p no:randomly tests/runtime/test_zz_stress_tmp.py
Environment: HWQ (1, or none), REPS, KIND (broadcast / allgather), SLOTS (4, or none for the default)."""
import os
import threading

import fake_cuda  # tests/support, on the path under tests/ (conftest.py)
import numpy as np
import pytest
from fake_cuda import dev
from test_hw_queues_cpu import _plan  # the very plans the test runs

QUEUES = os.environ.get("HWQ", "1")
REPS = int(os.environ.get("REPS", "10"))
KIND = os.environ.get("KIND", "broadcast")
SLOTS = os.environ.get("SLOTS", "4")

@pytest.mark.parametrize("rep", range(REPS))
def test_stress(monkeypatch, rep):
    from threaded import node_executors

    from hoccl_compiler import replay
    nodes, L, net = 3, 2, 256 << 10
    fake_cuda.install(monkeypatch, async_streams=True, hw_queues=None if QUEUES == "none" else int(QUEUES))
    plans = [_plan(KIND, nodes, L, net), _plan("allgather", nodes, L, net, (1 << 20) + 17)]
    G = nodes * L
    rng = np.random.default_rng([nodes, L, rep])
    data = []
    for plan in plans:
        data.append({r: (rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8),
                         np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)) for r in range(G)})
    options = {} if SLOTS == "none" else {"slots": int(SLOTS)}
    errors = node_executors(plans, nodes, lambda n: [{r: (dev(i, 0), dev(o, 0)) for r, (i, o) in d.items()
                                                      if r // L == n} for d in data], timeout_s=60,
                            setup=lambda: setattr(fake_cuda._current, "process", threading.get_ident()), **options)
    assert not errors, str(errors)[:1000]
    bad = []
    for k, (plan, d) in enumerate(zip(plans, data, strict=True)):
        want = replay(plan, [d[r][0] for r in range(G)]).outputs
        for r in range(G):
            got = d[r][1]
            if not np.array_equal(got, want[r]):
                wrong = np.flatnonzero(got != want[r])
                poison = int(np.sum(got[wrong] == 0xA5))
                a, b = int(wrong[0]), int(wrong[-1]) + 1
                shifts = []
                for sh in range(-8, 9):
                    o = sh * (256 << 10)
                    if a + o >= 0 and b + o <= len(want[r]) and np.array_equal(got[a:b], want[r][a + o:b + o]):
                        shifts.append(sh)
                # which input/other outputs match?
                bad.append(f"run {k} {plan.collective.kind} rank {r}: {len(wrong)} wrong, {a}..{b}, poison {poison}, "
                           f"equals the chunk shifted by {shifts}")
    assert not bad, [b for b in bad]
