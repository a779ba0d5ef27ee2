"""Environment settings: every ``HOCCL_*`` variable the runtime reads, read through one place.

A value that is not what the setting takes raises :class:`HocclError` naming the variable, the value
and what it takes, instead of a bare ``ValueError`` from deep inside a constructor. The table in
docs/settings.md lists the same settings (a test checks that the two agree).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import HocclError

__all__ = ["SETTINGS", "env_int", "env_float", "env_flag", "env_choice", "env_text", "cache_dir"]

# name -> (default, what it does); defaults as the code applies them
SETTINGS: dict[str, tuple[str, str]] = {
    "HOCCL_EAGER_BYTES": ("4194304", "send/recv of up to this many bytes take the eager path (0: off; the default is 0 "
                          "with HOCCL_LOCAL_COPIES=peer: the eager receive copies within its GPU)"),
    "HOCCL_EAGER_COLLECTIVES": ("0", "1: small collectives take the eager path too"),
    "HOCCL_BROADCAST_SPLIT_BYTES": ("4194304", "the one-node communicator: a broadcast of at least this many bytes "
                                    "(a multiple of the world, 3 ranks or more, unpaced) is a scatter and an in-place "
                                    "AllGather (0: always one plan)"),
    "HOCCL_GRAPH_AFTER": ("2", "from this call on with the same buffers, a call is one CUDA graph launch (0: never)"),
    "HOCCL_GRAPH_TAIL_DIRECT": ("0", "1: a call's graph ends at its copies, its last handshake launched after it"),
    "HOCCL_DMA_QUEUES": ("1", "copy streams per GPU that intra-node plans spread peers over (1-4)"),
    "HOCCL_LOCAL_COPIES": ("sm", "who copies a rank's own block (out-of-place calls): sm (the driver's copy kernel) or "
                           "peer (copy engines, through a peer GPU's output over NVLink: no SM, more link traffic)"),
    "HOCCL_PACE_PERIOD_US": ("250", "the pacing clock's tick in microseconds (one piece of a paced call per tick)"),
    "HOCCL_PACE_FEEDBACK": ("0", "1: paced calls scale their sleeps so back-to-back calls reach their rate "
                            "(may exceed it)"),
    "HOCCL_TCP_MIN_PART": ("1048576", "TCP: the smallest part a write is cut into across lanes (bytes)"),
    "HOCCL_TCP_DIRECT_BYTES": ("1048576", "TCP: a write (or the first part of a write cut over lanes) of at most this "
                               "many bytes into a lane with nothing queued is sent by the calling thread, not handed "
                               "to the lane's thread (0: always handed)"),
    "HOCCL_TCP_SPLIT": ("balance", "TCP: how writes are shared by lanes: balance (cut over the least-loaded lanes "
                        "unless whole on one ends soon enough) or idle (the idle lanes share it)"),
    "HOCCL_TCP_SPLIT_SLACK": ("1.0", "TCP, split=balance: a write goes whole to one lane if that ends within 1 + "
                              "this times the cut write's end"),
    "HOCCL_TCP_RECEIVE": ("thread", "TCP: who receives a lane's frames: thread (one blocking thread per lane) or poll "
                          "(the thread that polls the connection, the network proxy's driving loop, reads what each "
                          "lane has without waiting: no receiving threads; every write then goes through its lane's "
                          "thread, HOCCL_TCP_DIRECT_BYTES=0)"),
    "HOCCL_TCP_ENGINE": ("auto", "TCP: who runs a connection's lanes: thread (a sender and a receiver thread of the "
                         "interpreter per lane), native (threads of a small C engine, built once with the host's C "
                         "compiler and kept in HOCCL_CACHE_DIR, that never take the GIL; the same frames on the wire) "
                         "or auto (native where it builds and HOCCL_TCP_RECEIVE=thread, else thread). auto is the "
                         "default since FSDP over TCP nodes ran 0.99-1.12x as fast on it as on the Python lanes on "
                         "1x H100s (docs/results/training-history.md, 2026-12-05)"),
    "HOCCL_TCP_SPIN_US": ("0", "TCP on the native engine: microseconds a lane's threads look again for work (a part "
                          "to send, bytes to read; a sched_yield between looks) after their last frame before they "
                          "block in the kernel (0: they block at once); each lane's two threads keep a CPU busy that "
                          "long. 0 by default since 2026-12-07 (300 from 2026-12-06): on a 1x H100 host FSDP small "
                          "ran 5-11% faster with lanes that block at once than spinning 300 us, in all five runs, "
                          "both settings, and the pipeline within 1.2% (docs/results/history.md, 2026-12-07)"),
    "HOCCL_TCP_SOCKET_BUFFER": ("0", "TCP: fixed SO_SNDBUF/SO_RCVBUF in bytes (0: the kernel's autotuning)"),
    "HOCCL_SOCKET_ADDR": ("", "the address other nodes reach this one at (default: the route to MASTER_ADDR)"),
    "HOCCL_TIMER_SLACK_NS": ("1000", "Linux: the timer slack in ns of the threads that drive network calls while they "
                             "do (their 20-50 us poll sleeps otherwise last up to 50 us longer); 0: the kernel's"),
    "HOCCL_NET_PROXY": ("process", "the one-GPU-per-node network communicator's proxy: process (a process of its own, "
                        "with the TCP transport, driving the calls through shared memory: it never waits for the "
                        "training loop's GIL) or thread (a thread of the training process)"),
    "HOCCL_NET_CHUNK_BYTES": ("2097152", "network communicators: the chunk size of their plans (bytes, 4096 .. 1 GiB) "
                              "where chunk_bytes= is not given: each chunk is staged, sent and landed in turn, so "
                              "smaller chunks overlap these steps within smaller calls"),
    "HOCCL_NET_LANES": ("8", "network communicators: TCP connections per peer (1-64) where lanes= is not given; each "
                        "lane has a sender and a receiver thread in the proxy"),
    "HOCCL_NET_POLL_US": ("10", "the network proxy process: microseconds it sleeps between looks at the flags and "
                          "the transport while a call is in flight or awaited (1-10000); 0: it never sleeps there, "
                          "it yields its CPU between looks (sched_yield) and so keeps a CPU busy while a call is "
                          "awaited or in flight, as NCCL's proxy thread does (docs/results/training-history.md, "
                          "2026-12-06)"),
    "HOCCL_NET_OVERLAP": ("1", "the one-GPU-per-node network communicator (read when it is made) and the host "
                          "executor: 1 has consecutive runs use alternate halves of every staging ring, so a node's "
                          "next run sends once the nodes that received two runs back are through, not the last (0: "
                          "every run uses the whole ring and waits for the last). On by default since 2026-12-06, with "
                          "HOCCL_NET_SEND_GATES and HOCCL_TCP_SPIN_US=300 (0 since 2026-12-07): together, on one 1x "
                          "H100 host, FSDP small +21% and pipeline small +9% tokens/s under MPS, +10% and +9% "
                          "time-sliced (this one, with HOCCL_NET_POLL_US=0, which alone moved nothing: +19% and +4% "
                          "under MPS); on another host "
                          "0.95-1.02x all three off, within the rounds' spreads (docs/results/training-history.md)"),
    "HOCCL_NET_WAKE": ("1", "the network proxy on the native TCP engine with one peer node: its pause between looks "
                       "ends as soon as a frame left or came in (a wait on the engine) instead of after "
                       "HOCCL_NET_POLL_US (0: a sleep)"),
    "HOCCL_NET_LAND_GATES": ("1", "the GPU network executor on the native TCP engine: 1 has the engine's receiving "
                             "thread open a chunk's landing gate (the flag its GPU copy waits on) the moment the chunk "
                             "is in the ring, instead of the proxy's loop once it has seen the chunk (0). On by "
                             "default since 2026-12-06: on 1x H100s, two runs, FSDP and pipeline small +1-5% tokens/s "
                             "under MPS and -2% to +4% time-sliced (docs/results/training-history.md)"),
    "HOCCL_NET_SEND_GATES": ("1", "the GPU network executor on the native TCP engine: 1 posts a chunk's write as soon "
                             "as its staging copy is issued, to leave when the engine's watcher thread sees the copy's "
                             "done count, instead of once the proxy's loop has seen it (0). On by default since "
                             "2026-12-06, with HOCCL_NET_OVERLAP and HOCCL_TCP_SPIN_US=300 (0 since 2026-12-07) "
                             "(docs/results/training-history.md)"),
    "HOCCL_NET_LAUNCH_CACHE": ("1", "the network executor: 1 keeps a run's launch list and issues it again, with "
                               "new counts, for the next run of the same plan on the same buffers (0: built anew "
                               "every run)"),
    "HOCCL_NET_TRACE": ("", "the network proxy process: a path prefix; each rank writes PREFIX.rankN.csv at close "
                        "(PREFIX.gK.rankN.csv for its K-th network group after the first), a "
                        "row per call with when it arrived, was taken, its first staging copies let go, its plan "
                        "notice was written, the nodes' plan notices were in, its stream reached it, its last write "
                        "was posted, its last chunk came in and was landed, its network part and its copies were "
                        "through, and its "
                        "driving loop's longest poll sleep and longest turn (us); PREFIX.rankN.gc.csv, the "
                        "proxy's garbage collections; and PREFIX.rankN.frames.csv, its TCP writes' posts and its "
                        "frames' sends and landings (receiving threads only); python -m hoccl_runtime.net.trace "
                        "PREFIX summarizes them"),
    "HOCCL_NET_EXCHANGE": ("1", "the one-GPU-per-node network communicator of 2 ranks: a batch of one send and one "
                           "receive (batch_isend_irecv, as 1F1B pipelining fuses them) runs as one call that moves both "
                           "messages; the other rank must batch its pair the same way (0: one call per message)"),
    "HOCCL_NET_ONE_STREAM": ("2", "the one-GPU-per-node network communicator: 1 puts a call's staging and landing "
                             "copies on the caller's stream itself, after START and with the DONE wait in their last "
                             "batch, where its plan has one stage and no transfer of more chunks than a ring has "
                             "slots (a 1F1B exchange: 6 driver calls instead of 12); 2: the same with START a "
                             "counter in the first batch and no DONE wait (5 driver calls; the stream goes on once its "
                             "own landings are through, not once the proxy has seen them; a run from a kept launch "
                             "list is told to the proxy before its launch); 0: on copy streams of their own after an "
                             "event. The default is 2: pipeline small ran 1.05x / 0.99x NCCL on the 1x H200 against "
                             "0's 0.96x / 0.96x, FSDP small the same within its spread (docs/results/2026-12-05-s43)"),
    "HOCCL_NET_NATIVE_CALL": ("auto", "the one-GPU-per-node network communicator with its proxy process: a call on one "
                              "stream (HOCCL_NET_ONE_STREAM=2) from a kept launch list moves its counts, tells the "
                              "proxy and makes its driver calls in one C call (hoccl_runtime/net/kept.py, built once "
                              "with the host's C compiler); auto: where that builds (else the Python path, with a "
                              "warning), on: the same or an error, off: the Python path"),
    "HOCCL_BATCH_ISSUE": ("1", "hoccl process groups: dist.batch_isend_irecv issues the group's batch when it returns, "
                          "as NCCL's does, and torch pipelining's batches of sends only or receives only (which newer "
                          "torch issues op by op) go out at once (0: at the first wait on one of their Works)"),
    "HOCCL_NET_AHEAD": ("2", "network communicators: a call waits (without the GIL) until at most this many earlier "
                        "calls are unfinished, so the application's thread cannot run so far ahead that it blocks in "
                        "CUDA holding the GIL while the proxy thread needs it (0: no bound; with HOCCL_NET_PROXY="
                        "process the default is 0)"),
    "HOCCL_REDUCE": ("auto", "hoccl process groups: who computes reductions: nccl (an NCCL group from the same store), "
                     "hoccl (copy engines, then one local kernel) or auto (nccl unless ranks share a GPU)"),
    "HOCCL_GPUS_PER_NODE": ("", "hoccl process groups: ranks per node (global rank // this), e.g. 1 to make each GPU "
                            "of one machine its own node over TCP (default: the host each rank runs on)"),
    "HOCCL_TOPOLOGY": ("", "a topology file (JSON/YAML, hoccl_compiler.Topology's fields) with this machine's figures "
                       "for the runtime's plans (default: the GPUs' links and name, hoccl_runtime.plans)"),
    "HOCCL_MEASURE_LINKS": ("0", "1: measure the GPU-to-GPU copy bandwidth once (kept in HOCCL_CACHE_DIR) even where "
                            "a preset matches the GPU's name (PCIe links and unknown GPUs are always measured)"),
    "HOCCL_CACHE_DIR": ("~/.cache/hoccl", "where the runtime keeps what it measured once (links.json: GPU-to-GPU "
                        "bandwidths)"),
    "HOCCL_MAX_PLAN_BYTES": ("2147483648", "the largest plan file load_plan reads, in bytes after decompression (a "
                             "guard against decompression bombs)"),
    "HOCCL_MAX_PLAN_MEMORY": ("", "the memory a plan may take to decode or compile, in bytes (default: half of this "
                              "machine's memory to decode or compile a pattern, 90% of its available memory for an "
                              "explicit compile): a compact or pattern header that claims a huge collective, a small "
                              "gzip of millions of stages, or an explicit compile of too many flows is refused before "
                              "it starts, with the numbers"),
    "HOCCL_DEBUG": ("", "set to anything: the CLIs print the traceback of an unexpected error"),
}


def _text(name: str) -> str | None:
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a HOCCL setting; add it to hoccl_runtime.settings.SETTINGS")
    text = os.environ.get(name, "").strip()
    return text or None


def _number(name: str, default: Any, convert: Any, what: str) -> tuple[Any, bool]:
    """(value, whether it came from the environment)."""
    text = _text(name)
    if text is None:
        return default, False
    try:
        return convert(text), True
    except ValueError:
        raise HocclError(f"{name}={text!r} is not {what}; unset it (default {default}) or give one") from None


def env_int(name: str, default: int, least: int, most: int | None = None) -> int:
    """An integer setting from the environment (``default`` when unset or empty)."""
    value, given = _number(name, default, lambda t: int(t, 0), "an integer")
    if given and (value < least or (most is not None and value > most)):
        span = f"{least}..{most}" if most is not None else f"at least {least}"
        raise HocclError(f"{name}={value} is out of range: give {span} (default {default})")
    return value


def env_float(name: str, default: float) -> float:
    """A positive number setting from the environment."""
    value, given = _number(name, default, float, "a number")
    if given and not value > 0:
        raise HocclError(f"{name}={value:g} must be positive (default {default:g})")
    return value


def env_flag(name: str, default: bool) -> bool:
    """A 0/1 setting from the environment."""
    text = _text(name)
    if text is None:
        return default
    if text not in ("0", "1"):
        raise HocclError(f"{name}={text!r}: give 1 (on) or 0 (off); default {int(default)}")
    return text == "1"


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` from the environment."""
    text = _text(name)
    if text is None:
        return default
    if text not in choices:
        raise HocclError(f"{name}={text!r}: give one of {', '.join(choices)} (default {default})")
    return text


def env_text(name: str) -> str | None:
    """A text setting (a path, an address) from the environment, or None when unset or empty."""
    return _text(name)


def cache_dir() -> Path:
    """Where the runtime keeps what it measured or built once (``HOCCL_CACHE_DIR``, default ``~/.cache/hoccl``)."""
    return Path(env_text("HOCCL_CACHE_DIR") or Path.home() / ".cache" / "hoccl")
