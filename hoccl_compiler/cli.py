"""Console scripts ``hoccl-compile`` and ``hoccl-inspect`` (argparse, ``main(argv=None) -> int``).

Exit codes: 0 success, 2 bad input (message on stderr, no traceback), 1 internal error.
Set ``HOCCL_DEBUG=1`` to see tracebacks of internal errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import HocclError

__all__ = ["compile_main", "inspect_main"]



CHUNK_ENTRIES_WARN = 1_000_000  # an explicit --chunk that makes more chunk entries than this is warned about


class _UsageError(Exception):
    pass


class _Progress:
    """Progress of a compile on stderr. ``verbose``: one timestamped line per message (a log's form). Otherwise, on
    a terminal only and once the compile has run ``after_s`` seconds: one status line redrawn in place (a bar over
    the passes done, the time, the latest message), cleared when the compile ends; elsewhere nothing (a pipe, a
    CI log). ``quiet``: nothing at all."""

    def __init__(self, stream, passes: int, *, verbose: bool = False, quiet: bool = False, after_s: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter, width: int | None = None,
                 tick_s: float | None = 0.5):
        self.stream, self.passes, self.verbose, self.after_s, self.clock = stream, passes, verbose, after_s, clock
        self.bar = not quiet and not verbose and bool(getattr(stream, "isatty", lambda: False)())
        self.width = width
        self.started = clock()
        self.done = 0
        self.drawn = 0  # characters of the status line on screen
        self.message = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = None
        if self.bar and tick_s:  # the line's clock moves on between messages (a long pass sends none)
            self._ticker = threading.Thread(target=self._tick_loop, args=(tick_s,), name="hoccl-progress", daemon=True)
            self._ticker.start()

    def __call__(self, message: str) -> None:
        elapsed = self.clock() - self.started
        if message.startswith("pass "):
            self.done = min(self.passes, self.done + 1)
        elif message.startswith("network chunks of"):  # --net-chunk auto: another whole compile, its passes anew
            self.done = 0
        self.message = message
        if self.verbose:
            print(f"[{elapsed:7.2f}s] {message}", file=self.stream, flush=True)
        else:
            self.tick()

    def tick(self) -> None:
        """Redraw the status line with the time now and the latest message (the ticker's call)."""
        elapsed = self.clock() - self.started
        if not self.bar or elapsed < self.after_s:
            return
        filled = round(20 * self.done / max(1, self.passes))
        line = f"[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.passes} passes {elapsed:6.1f}s  {self.message}"
        width = self.width or shutil.get_terminal_size((80, 24)).columns
        line = line[:max(10, width - 1)]
        with self._lock:
            if self._stop.is_set():
                return
            self.stream.write("\r" + line.ljust(self.drawn))
            self.stream.flush()
            self.drawn = len(line)

    def _tick_loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.tick()

    def close(self) -> None:
        """Stop the ticker; clear the status line, if one was drawn."""
        with self._lock:
            self._stop.set()
            if self.drawn:
                self.stream.write("\r" + " " * self.drawn + "\r")
                self.stream.flush()
                self.drawn = 0
        if self._ticker is not None:
            self._ticker.join(1.0)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would sys.exit(2) itself; we return 2 from main
        raise _UsageError(f"{message}\n{self.format_usage().strip()}")


@contextlib.contextmanager
def _few_gc_passes():
    """Python's cyclic collector passes over every tracked object each 700 allocations by default; a large compile
    or plan read allocates millions of lists and models and no cycles to speak of, so a CLI run takes them 50,000
    at a time (a 1024-GPU All-to-All's compile and write on the 2-core VM, two interleaved runs each: 20.1 / 19.7 s
    against 22.4 / 20.3 s, the same file and the same peak memory)."""
    import gc

    before = gc.get_threshold()
    gc.set_threshold(50_000, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def _no_hugepage_advice():
    """NumPy advises the kernel to back each large array with transparent huge pages. Where the kernel then compacts
    memory on the fault (``/sys/kernel/mm/transparent_hugepage/defrag`` = ``madvise``, a common default), touching
    a fresh array costs far more than its pages: on the 2-core VM, 1 GiB of ``np.ones`` took 7.9-10.3 s with the
    advice and 0.37 s without, and the 1024-GPU All-to-All's CLI compile 33.5-35.2 s wall (23.7-25.3 s of it system
    time) against 12.1-13.0 s (docs/results/compiler-history.md, 2026-12-06). A CLI run owns its process, so it drops
    the advice, unless ``NUMPY_MADVISE_HUGEPAGE`` is set (NumPy's own switch, which then decides)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            _set_madvise_hugepage = None
    if _set_madvise_hugepage is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    before = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(before)


@contextlib.contextmanager
def _memory_kept():
    """glibc's malloc serves a large block by ``mmap`` and hands it back to the kernel when it is freed; the next
    one is fresh memory, which the kernel must fault in and zero page by page. A compile frees and allocates
    arrays of tens of MB thousands of times, so its run asks malloc to keep what it frees (no ``mmap``, no trim) and
    reuses it: on the 2-core VM, the 1024-GPU All-to-All's CLI compile faulted 572 k pages instead of 1.56 M and took
    12.3-13.3 s wall against 14.3-18.4 s, six runs each alternated (2026-12-07, docs/results/compiler-history.md).
    Afterwards (a CLI called inside another program: tests) glibc's defaults come back and the kept memory is
    trimmed. Elsewhere (no glibc) nothing changes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): no such calls
        yield
        return
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # malloc.h
    kept = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    try:
        yield
    finally:
        if kept:
            mallopt(M_MMAP_MAX, 65536)  # glibc's defaults (its threshold then no longer moves on its own)
            mallopt(M_TRIM_THRESHOLD, 128 * 1024)
            trim(0)


def _run(prog: str, body: Callable[[], int]) -> int:
    try:
        with _few_gc_passes(), _no_hugepage_advice(), _memory_kept():
            return body()
    except _UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (``| head``): as other tools, stop quietly
        # Python would report the failed flush of stdout at exit: point stdout at nothing first
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (HocclError, ValueError, OSError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"{prog}: error: ran out of memory; lower HOCCL_MAX_PLAN_MEMORY below this machine's free memory so "
              "that too large a plan or compile is refused before it starts, or use a machine with more",
              file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if os.environ.get("HOCCL_DEBUG"):
            traceback.print_exc()
        print(f"{prog}: internal error: {type(exc).__name__}: {exc}\n"
              "this is a bug in HOCCL; rerun with HOCCL_DEBUG=1 for a traceback and please report it",
              file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    """An error as one line: a pydantic ValidationError as "field: what" pairs, anything else with its newlines
    folded."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']} (got {e.get('input')!r})"
                 for e in exc.errors()[:3]]
        more = f"; and {exc.error_count() - 3} more" if exc.error_count() > 3 else ""
        return "; ".join(parts) + more
    return " ".join(str(exc).split())


def _add_topology_args(p: argparse.ArgumentParser, default: str | None) -> None:
    from .topology import PRESETS

    g = p.add_argument_group("topology")
    g.add_argument("--topology", default=default, metavar="PRESET|FILE",
                   help=f"a preset ({', '.join(sorted(PRESETS))}) or a JSON/YAML topology file"
                        + (f" (default {default})" if default else ""))
    g.add_argument("--nodes", type=int, default=None, help="number of nodes (default 2 for a preset)")
    g.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default: the preset's)")
    g.add_argument("--forwarding", choices=("symmetric", "none"), default=None,
                   help="inter-node path through symmetric peers (the paper's default) or straight from each GPU")
    g.add_argument("--dma-queues", type=int, default=None, help="DMA queues per GPU the plan may use")
    g.add_argument("--transport", choices=("tcp", "verbs"), default=None,
                   help="what moves the bytes between nodes, whose host costs the cost model charges (default: the "
                        "preset's; a topology file's own costs win)")


def _topology_from_args(args: argparse.Namespace):
    from .topology import PRESETS, load_topology, make_topology

    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node),
                        ("--dma-queues", args.dma_queues)):
        if value is not None and value < 1:
            raise _UsageError(f"{flag} {value}: give a whole number >= 1")
    overrides = dict(gpus_per_node=args.gpus_per_node, forwarding=args.forwarding, dma_queues=args.dma_queues,
                     transport=args.transport)
    if args.topology in PRESETS:
        return make_topology(args.topology, nodes=args.nodes if args.nodes is not None else 2, **overrides)
    if args.topology is None:
        raise _UsageError("give --topology (a preset or a topology file)")
    if not Path(args.topology).exists():
        raise HocclError(f"--topology {args.topology!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
                         "nor an existing file")
    return load_topology(args.topology, nodes=args.nodes, **overrides)


# --- hoccl-compile ----------------------------------------------------------------------------------

def _compile_parser() -> argparse.ArgumentParser:
    from .collective import KINDS
    from .pipeline import PASS_NAMES

    p = _Parser(prog="hoccl-compile", description="Compile a collective into a verified HOCCL plan (JSON).",
                epilog="example: hoccl-compile alltoall --topology paper-h800 --nodes 4 --size 1GiB "
                       "-o schedules/a2a-4x8-1GiB.json")
    p.add_argument("collective", nargs="?", default="alltoall", metavar="COLLECTIVE",
                   help=f"one of {', '.join(KINDS)} (default alltoall)")
    _add_topology_args(p, default="paper-h800")
    g = p.add_argument_group("collective")
    g.add_argument("--size", default=None,
                   help="per-rank buffer size, e.g. 1GiB, 512MiB, 1G (K/M/G alone are powers of 1024, as in "
                   "nccl-tests; KB/MB/GB of 1000; default 1GiB)")
    g.add_argument("--root", type=int, default=None, help="root rank of broadcast, scatter, gather (default 0)")
    g.add_argument("--matrix", default=None, metavar="FILE",
                   help="alltoallv / matrix: G x G byte matrix (.npy, .csv, .json)")
    g.add_argument("--pairs", default=None, metavar="FILE",
                   help="sendrecv: [src, dst, bytes] rows (.json, .csv); default: rank i -> i+1 with --size bytes")
    from .collective import IN_PLACE_KINDS

    g.add_argument("--in-place", action="store_true", help=f"in-place variant ({', '.join(IN_PLACE_KINDS)})")
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="plan file (.json or .json.gz); default schedules/<collective>-<nodes>x<gpus>-<size>.json")
    o.add_argument("--pattern", choices=("auto", "on", "off"), default="auto",
                   help="a uniform alltoall/allgather as a pattern plan (shifts instead of lists: any number of "
                        "GPUs); auto: above 1024 GPUs (default)")
    o.add_argument("--encoding", choices=("auto", "full", "compact"), default="auto",
                   help="plan file encoding: full (every column, readable), compact (what the compiler decided; "
                        "the rest is derived on reading), auto: compact above 100,000 chunk entries (default)")
    o.add_argument("--chunk", default="auto",
                   help="chunk size, e.g. 4MiB, or auto: the size with the least cost-model v2 time (default auto)")
    o.add_argument("--net-chunk", default="auto", metavar="SIZE|auto|off",
                   help="the network transfers' own chunk size, e.g. 1MiB; off: --chunk's; auto: 1 MiB, 512 KiB or "
                   "256 KiB where the cost model v2 puts one more than 1%% ahead of one chunk, for a multicast "
                   "AllGather or Broadcast across nodes over verbs (else off; default auto). Smaller than the copies' "
                   "chunk, every "
                   "network hop passes bytes on sooner while the copies keep their size; a Broadcast's parts then go "
                   "down one chain of nodes per rail"),
    o.add_argument("--dump-after", choices=PASS_NAMES, default=None, metavar="PASS",
                   help=f"also write the intermediate after PASS ({', '.join(PASS_NAMES)}) as JSON to "
                        "<output>.<PASS>.json")
    o.add_argument("--max-extra-time", type=float, default=None, metavar="FRACTION",
                   help="allow this fraction more RDMA time to cut the number of stages (e.g. 0.01; 0: the "
                        "time-optimal peel, however many stages); default: the stages the cost model v2 says pay "
                        "for their barriers")
    o.add_argument("--multicast", choices=("on", "off"), default="on",
                   help="allgather/broadcast: each block crosses the network once per node and is passed on inside "
                        "it (on, the default); off: one unicast flow per source and destination GPU. Pattern plans "
                        "are unicast")
    o.add_argument("--no-baselines", action="store_true", help="skip the two simpler schedules in the report")
    o.add_argument("-q", "--quiet", action="store_true", help="print only the output path")
    o.add_argument("-v", "--verbose", action="store_true",
                   help="a timestamped line on stderr per pass and progress message (default: on a terminal, a "
                        "status line once a compile has taken a second; elsewhere nothing)")
    return p


def compile_main(argv: Sequence[str] | None = None) -> int:
    """``hoccl-compile``: compile, verify and write a plan."""
    return _run("hoccl-compile", lambda: _compile(argv))


def _compile(argv: Sequence[str] | None) -> int:
    from .collective import KINDS, REDUCTIONS, CollectiveSpec, check_root, load_matrix, load_pairs, refuse_reduction
    from .ir import CompileOptions
    from .pipeline import PASS_NAMES
    from .units import parse_size

    args = _compile_parser().parse_args(argv)
    kind = args.collective.lower().replace("-", "").replace("_", "")  # torch's names too: all_gather, all_to_all
    if kind in {r.replace("_", "") for r in REDUCTIONS}:
        raise refuse_reduction(kind)
    if kind not in KINDS:
        raise _UsageError(f"unknown collective {args.collective!r}; choose one of {', '.join(KINDS)}")
    topo = _topology_from_args(args)
    size = parse_size(args.size) if args.size is not None else None
    matrix = pairs = None
    if kind in ("alltoallv", "matrix"):
        if args.matrix is None:
            raise _UsageError(f"{kind} needs --matrix FILE (a {topo.num_gpus}x{topo.num_gpus} byte matrix)")
        matrix = load_matrix(args.matrix)
    elif args.matrix is not None:
        raise _UsageError(f"--matrix applies to alltoallv and matrix, not {kind}")
    if kind == "sendrecv" and args.pairs is not None:
        pairs = load_pairs(args.pairs)
    elif args.pairs is not None:
        raise _UsageError(f"--pairs applies to sendrecv, not {kind}")
    if size is None and matrix is None and pairs is None:
        size = 1 << 30
    if args.root is not None and kind not in ("broadcast", "scatter", "gather"):
        raise _UsageError(f"--root applies to broadcast, scatter and gather, not {kind}")
    if args.root is not None:
        check_root(args.root, topo.num_gpus)
    spec = CollectiveSpec(kind=kind, size_bytes=size if matrix is None else None, root=args.root,
                          matrix=matrix, pairs=pairs, in_place=args.in_place)
    chunk = None if args.chunk == "auto" else parse_size(args.chunk)
    if chunk is not None and chunk <= 0:
        raise _UsageError(f"--chunk {args.chunk} must be a positive size, e.g. 4MiB, or auto")
    if args.max_extra_time is not None and not 0 <= args.max_extra_time <= 1:
        raise _UsageError(f"--max-extra-time {args.max_extra_time} must be a fraction in 0..1, e.g. 0.01")
    net_chunk = args.net_chunk if args.net_chunk == "auto" else None if args.net_chunk == "off" else \
        parse_size(args.net_chunk)
    if net_chunk not in (None, "auto") and net_chunk <= 0:
        raise _UsageError(f"--net-chunk {args.net_chunk} must be a positive size, e.g. 1MiB, or auto or off")
    options = CompileOptions(chunk_bytes=chunk, net_chunk_bytes=net_chunk, baselines=not args.no_baselines,
                             max_extra_time=args.max_extra_time,
                             byte_replay=None,  # the CLI replays small plans byte by byte too
                             multicast=args.multicast == "on")
    progress = _Progress(sys.stderr, len(PASS_NAMES), verbose=args.verbose, quiet=args.quiet)
    try:
        return _compile_and_write(args, kind, topo, spec, size, options, progress)
    finally:
        progress.close()


def _compile_and_write(args, kind: str, topo, spec, size: int | None, options, progress: _Progress) -> int:
    from .codec import save_plan
    from .pipeline import compile_state, dump_state
    from .report import format_text

    output = Path(args.output) if args.output else Path("schedules") / _default_name(kind, topo, size, args.root)
    if output.is_dir():  # before anything is written (a --dump-after file beside it included)
        raise _UsageError(f"-o {output} is a folder; give the plan's file name, e.g. {output / 'plan.json'}")
    from .pattern import EXPAND_LIMIT, compile_pattern, format_pattern, pattern_applies, verify_pattern

    why_not = pattern_applies(topo, spec)
    if args.pattern == "on" and why_not is not None:
        raise _UsageError(f"--pattern on: no pattern plan for this collective ({why_not}); use --pattern off")
    if args.pattern == "on" and options.net_chunk_bytes not in (None, "auto"):
        raise _UsageError("--net-chunk: a pattern plan takes one chunk size; give --net-chunk off or --pattern off")
    if args.pattern == "on" or (args.pattern == "auto" and why_not is None and topo.num_gpus > EXPAND_LIMIT
                                and options.net_chunk_bytes in (None, "auto")):
        if args.dump_after:
            raise _UsageError("--dump-after shows the explicit compile's passes; add --pattern off")
        progress("pattern plan: shifts, native spread, v2 per distinct stage")
        pattern = compile_pattern(topo, spec, options)
        verify_pattern(pattern)
        save_plan(pattern, output)
        progress(f"wrote {output} ({output.stat().st_size / 1e6:.2f} MB)")
        progress.close()  # the status line goes before the result is printed
        print(output if args.quiet else f"{format_pattern(pattern)}\n\nverified and wrote {output} (a pattern "
              "plan)")
        return 0
    if args.dump_after and args.dump_after != "verify":
        partial = compile_state(topo, spec, options, stop_after=args.dump_after, progress=progress)
        _write_json(output.with_name(output.name + f".{args.dump_after}.json"), dump_state(partial, args.dump_after))
    state = compile_state(topo, spec, options, progress=progress)
    plan = state.plan
    assert plan is not None
    if args.dump_after == "verify":
        _write_json(output.with_name(output.name + ".verify.json"), dump_state(state, "verify"))
    # the passes' arrays go before the write, whose read-back check decodes a second compile state of its own
    del state
    save_plan(plan, output, encoding=args.encoding)
    progress(f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB)")
    progress.close()
    entries = plan.num_chunk_entries()
    if args.chunk != "auto" and entries > CHUNK_ENTRIES_WARN and not args.quiet:
        print(f"warning: --chunk {args.chunk} makes {entries:,} chunk entries (a {output.stat().st_size / 1e6:.0f} MB "
              "plan); every chunk costs a copy engine a few microseconds to start and the runtime host work, so "
              "this plan runs slowly: use --chunk auto, or 1MiB and up", file=sys.stderr)
    if args.quiet:
        print(output)
    else:
        print(format_text(plan, max_stages=8, timelines=0))
        print(f"\nverified and wrote {output}")
    return 0


def _default_name(kind: str, topo, size: int | None, root: int | None) -> str:
    from .units import format_bytes

    size_text = format_bytes(size).replace(" ", "") if size is not None else "custom"
    root_text = f"-root{root}" if root else ""
    return f"{kind}-{topo.nodes}x{topo.gpus_per_node}-{size_text}{root_text}.json"


def _write_json(path: Path, data: object) -> None:
    """Atomically, through a temporary file of a random name made exclusively (mkstemp: a name planted in
    advance, a symlink say, is never followed), removed again if anything fails (a full disk)."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- hoccl-inspect ----------------------------------------------------------------------------------

def _inspect_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hoccl-inspect", description="Summarise, verify and draw a HOCCL plan file.")
    p.add_argument("plan", help="plan file (.json or .json.gz)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text for people, json for tools")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="draw stage matrices and a Gantt chart of NVLink / RDMA / DMA queues (needs matplotlib)")
    p.add_argument("--verify", action="store_true", help="re-run the full verifier on the file")
    p.add_argument("--simulate", action="store_true",
                   help="simulate the plan chunk by chunk (serial queues, per-chunk DMA start, shared ports)")
    p.add_argument("--chunk-start-us", type=float, default=None, metavar="US",
                   help="with --simulate: per-chunk DMA start (default: the topology's costs.dma_start_us)")
    p.add_argument("--stages", type=int, default=20, metavar="N", help="rows of the per-stage table (default 20)")
    p.add_argument("--timelines", type=int, default=1, metavar="N",
                   help="stages whose per-queue chunk order is printed (default 1)")
    _add_topology_args(p, default=None)
    p.epilog = "with --topology, the plan is checked against that topology (a plan for another one is refused)"
    return p


def _check_inspect_args(args: argparse.Namespace) -> None:
    """Refuse what would be ignored or meaningless: a row count below 0, a chunk start that is not a finite time
    (or without --simulate), topology settings without --topology (the plan is checked against a topology only
    where one is given)."""
    for name, value in (("--stages", args.stages), ("--timelines", args.timelines)):
        if value < 0:
            raise _UsageError(f"{name} {value}: give a number of rows >= 0")
    if args.chunk_start_us is not None:
        if not args.simulate:
            raise _UsageError("--chunk-start-us applies to --simulate: give both")
        if not 0 <= args.chunk_start_us < float("inf"):
            raise _UsageError(f"--chunk-start-us {args.chunk_start_us} must be a finite time >= 0")
    given = [f"--{k.replace('_', '-')}" for k in ("nodes", "gpus_per_node", "forwarding", "dma_queues", "transport")
             if getattr(args, k) is not None]
    if given and args.topology is None:
        raise _UsageError(f"{', '.join(given)} {'describe' if len(given) > 1 else 'describes'} the topology to check "
                          "the plan against: give --topology too (a preset or a topology file)")


def inspect_main(argv: Sequence[str] | None = None) -> int:
    """``hoccl-inspect``: readable summary, JSON summary, verification and plots of a plan file."""
    return _run("hoccl-inspect", lambda: _inspect(argv))


def _inspect(argv: Sequence[str] | None) -> int:
    from .codec import load_plan
    from .report import format_text, stage_rows, summary
    from .schema import check_plan_topology

    args = _inspect_parser().parse_args(argv)
    _check_inspect_args(args)
    from .pattern import EXPAND_LIMIT, PatternPlan, expand, format_pattern, verify_pattern

    plan = load_plan(args.plan, patterns=True)
    if isinstance(plan, PatternPlan):
        if args.topology is not None:
            check_plan_topology(plan, _topology_from_args(args))
        if args.verify:
            verify_pattern(plan)
        if (args.simulate or args.plot) and plan.num_ranks > EXPAND_LIMIT:
            raise _UsageError(f"--simulate and --plot need the plan's chunks: a pattern plan of at most "
                              f"{EXPAND_LIMIT} GPUs (this one has {plan.num_ranks:,})")
        if not (args.simulate or args.plot):
            if args.format == "json":  # the bounds as an explicit plan's summary gives them (the collective's first)
                from .report import bounds

                b = bounds(plan)
                print(json.dumps({"plan_id": plan.plan_id, "pattern": True, "gpus": plan.num_ranks,
                                  "stages": plan.num_stages, "multicast": plan.options.multicast,
                                  "predicted_time_s": b["predicted_time_s"], "lower_bound_s": b["lower_bound_s"],
                                  "ratio": b["ratio"], "traffic_bound_s": b["traffic_bound_s"],
                                  "traffic_ratio": b["traffic_ratio"], "verified": bool(args.verify)},
                                 indent=2, sort_keys=True))
            else:
                print(format_pattern(plan, max_stages=args.stages))
                if args.verify:
                    print("\nverify: OK (the pattern: every shift once, native shifts whole, stage indices, id)")
            return 0
        plan = expand(plan)
    if args.topology is not None:
        check_plan_topology(plan, _topology_from_args(args))
    verified = None
    if args.verify:
        from .verify import hot_spots, verify_plan

        verify_plan(plan)
        verified = True
        for warning in hot_spots(plan):
            print(f"warning: {warning}", file=sys.stderr)
    else:  # an unverified file is read by index below: a damaged one is refused by name first
        from .verify import check_indices

        check_indices(plan)
    simulated = None
    if args.simulate:
        from .simulate import simulate

        start = plan.topology.costs.dma_start_us * 1e-6 if args.chunk_start_us is None else args.chunk_start_us * 1e-6
        simulated = simulate(plan, chunk_start_s=start)
        bound = plan.report.lower_bound_s
    if args.format == "json":
        out = summary(plan)
        out["stage_table"] = stage_rows(plan)
        if verified:
            out["verified"] = True
        if simulated is not None:
            out["simulated_s"] = simulated.total_s
            out["simulated_chunk_start_s"] = start
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(format_text(plan, max_stages=args.stages, timelines=args.timelines))
        if verified:
            print("\nverify: OK (postcondition, stage rules, chunk orders)")
        if simulated is not None:
            ratio = f" (x{simulated.total_s / bound:.3f} of the bound)" if bound > 0 else ""
            print(f"\nsimulated    {simulated.total_s * 1e6:.1f} us{ratio}: {simulated.chunks} chunks on serial "
                  f"queues, {start * 1e6:g} us DMA start each, ports shared max-min fairly (cost model v2: "
                  f"{plan.report.predicted_time_s * 1e6:.1f} us)")
    if args.plot:
        from .plot import plot_plan

        progress = _Progress(sys.stderr, 1)  # a status line on a terminal once it takes a second; else nothing
        try:
            plot_plan(plan, args.plot, progress=progress)
        finally:
            progress.close()
        if args.format == "text":
            print(f"wrote {args.plot}")
    return 0
