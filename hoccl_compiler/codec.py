"""Reading and writing plan files: the full, compact and pattern encodings (``save_plan``, ``load_plan``,
``plan_from_json``), with the bounds a file from outside gets before it is decoded (its size after decompression,
``HOCCL_MAX_PLAN_BYTES``; the memory its decoding takes, ``HOCCL_MAX_PLAN_MEMORY``).

Above the passes: decoding a compact or pattern plan derives what the file leaves out with the compiler's own
functions (:mod:`hoccl_compiler.compact`, :mod:`hoccl_compiler.pattern`), while :mod:`hoccl_compiler.schema`, the
plan's types and validation, imports none of them.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from .errors import PlanError, schema_problems
from .schema import PRETTY_LIMIT, SCHEMA_VERSION, Plan, check_plan_id, plan_id_for

Encoding = Literal["auto", "full", "compact"]

__all__ = ["save_plan", "load_plan", "plan_from_json", "max_plan_bytes", "decode_budget", "check_json_memory",
           "DEFAULT_MAX_PLAN_BYTES", "DECODE_BYTES_PER_CELL"]


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block (reference counting goes on), back on after where it was
    on; a decorator too. A plan file's JSON decodes into lists of up to tens of millions of ints (its tables hold
    them as :class:`~hoccl_compiler.schema.IntColumn` buffers after): each full collection while they are built walks
    every one of them (on the CPU VM, 2026-12-04, interleaved fresh processes, when the tables were lists too: a
    1024-GPU All-to-All loaded in 2.13-2.63 s with it paused against 2.37-3.89 s, and its CLI compile took 11.2-12.5 s
    against 11.9-13.6 s). The plans' structures hold no cycles to collect."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@collector_paused()
def save_plan(plan: Plan, path: str | Path, *, indent: int | None | Literal["auto"] = "auto",
              encoding: Encoding = "auto") -> Path:
    """Write atomically (temp file, then rename). ``.gz`` compresses (deterministically: no mtime).

    ``encoding``: "full" lists everything (indented when the plan has at most ``PRETTY_LIMIT`` chunk entries, for
    people to read); "compact" keeps only what the compiler decided (:mod:`hoccl_compiler.compact`); "auto"
    (default) writes plans of more than ``PRETTY_LIMIT`` chunk entries compact, the others full."""
    path = Path(path)
    if getattr(plan, "encoding", None) == "pattern-1":  # a pattern plan (hoccl_compiler.pattern): as it is
        data = plan.model_dump_json().encode() + b"\n"
        return _write_atomically(path, data)
    big = plan.num_chunk_entries() > PRETTY_LIMIT
    if encoding not in ("auto", "full", "compact"):
        raise PlanError(f"plan encoding {encoding!r}: choose auto, full or compact")
    if encoding == "compact" or (encoding == "auto" and big):
        from .compact import to_compact

        data = json.dumps(to_compact(plan), separators=(",", ":")).encode() + b"\n"
    else:
        if indent == "auto":
            indent = None if big else 1
        data = plan.model_dump_json(indent=indent).encode() + b"\n"
    return _write_atomically(path, data)


def _write_atomically(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)  # mkstemp makes 0600; a plan is a file to share
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


DEFAULT_MAX_PLAN_BYTES = 2 << 30  # a 2048-GPU All-to-All plan is 731 MB of JSON
MAX_PLAN_BYTES_LIMIT = 1 << 40   # HOCCL_MAX_PLAN_BYTES above this is a typo (1 TiB of JSON would not fit anyway)


def max_plan_bytes() -> int:
    """The largest plan (JSON bytes, after decompression) :func:`load_plan` reads: ``HOCCL_MAX_PLAN_BYTES``, else
    2 GiB."""
    text = os.environ.get("HOCCL_MAX_PLAN_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_PLAN_BYTES
    try:
        value = int(text, 0)
    except ValueError:
        raise PlanError(f"HOCCL_MAX_PLAN_BYTES={text!r} is not a byte count; unset it (default "
                        f"{DEFAULT_MAX_PLAN_BYTES}) or give one") from None
    if not 0 < value <= MAX_PLAN_BYTES_LIMIT:
        raise PlanError(f"HOCCL_MAX_PLAN_BYTES={value} must be in 1..{MAX_PLAN_BYTES_LIMIT} (1 TiB; default "
                        f"{DEFAULT_MAX_PLAN_BYTES})")
    return value


DECODE_BYTES_PER_CELL = 2048  # peak memory per cell of the traffic matrix while a compact plan is decoded (about
# 1.8 KB measured: a compact 512-GPU All-to-All loads at 480 MB above the import, CPU VM, 2026-12-02)


def decode_budget() -> int:
    """The memory a plan may take to decode (bytes): ``HOCCL_MAX_PLAN_MEMORY``, else half of this machine's memory
    (8 GiB where that cannot be read)."""
    text = os.environ.get("HOCCL_MAX_PLAN_MEMORY", "").strip()
    if not text:
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError, AttributeError):
            return 8 << 30
    try:
        value = int(text, 0)
    except ValueError:
        raise PlanError(f"HOCCL_MAX_PLAN_MEMORY={text!r} is not a byte count; unset it (default: half of this "
                        "machine's memory) or give one") from None
    if not 0 < value <= 1 << 50:
        raise PlanError(f"HOCCL_MAX_PLAN_MEMORY={value} must be in 1..{1 << 50}")
    return value


def _read_bounded(path: Path, cap: int) -> bytes:
    """The file's bytes, gunzipped in bounded pieces where it is gzip: never more than ``cap`` in memory."""
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head != b"\x1f\x8b":  # in pieces: a read of cap + 1 bytes reserves that much up front
                raw = bytearray()
                while len(raw) <= cap:
                    piece = fh.read(min(1 << 24, cap + 1 - len(raw)))
                    if not piece:
                        break
                    raw += piece
                if len(raw) > cap:
                    raise PlanError(f"plan {path} is larger than {cap} bytes (HOCCL_MAX_PLAN_BYTES); raise the cap "
                                    "if the plan is real")
                return bytes(raw)
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = bytearray()
            while True:
                piece = fh.read(1 << 20)
                if not piece:
                    break
                out += d.decompress(piece, cap + 1 - len(out))
                while d.unconsumed_tail and len(out) <= cap:
                    out += d.decompress(d.unconsumed_tail, cap + 1 - len(out))
                if len(out) > cap:
                    raise PlanError(f"plan {path} decompresses to more than {cap} bytes (HOCCL_MAX_PLAN_BYTES); "
                                    "raise the cap if the plan is real")
            if not d.eof:
                raise PlanError(f"plan {path} is a truncated gzip file; recompile it with hoccl-compile")
            return bytes(out)
    except OSError as exc:
        raise PlanError(f"cannot read plan {str(path)!r}: {exc.strerror or exc}") from None
    except zlib.error as exc:
        raise PlanError(f"plan {path} is a damaged gzip file ({exc}); recompile it with hoccl-compile") from None


@collector_paused()
def load_plan(path: str | Path, *, max_bytes: int | None = None, patterns: bool = False) -> Plan:
    """Read and validate a plan file (``.json`` or ``.json.gz``). Raises :class:`PlanError` with the reason. A
    file (decompressed) larger than ``max_bytes`` (default :func:`max_plan_bytes`) is refused before it is
    read whole. A pattern plan (hoccl_compiler.pattern) is expanded into a full plan, or with ``patterns``
    returned as the :class:`~hoccl_compiler.pattern.PatternPlan` it is."""
    path = Path(path)
    raw = _read_bounded(path, max_plan_bytes() if max_bytes is None else max_bytes)
    if patterns and b'"pattern-1"' in raw[:4096] + raw[-4096:]:
        from .pattern import load_pattern

        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise PlanError(f"plan {path} is not valid JSON ({exc}); recompile it with hoccl-compile") from None
        except ValueError as exc:  # an integer of more digits than Python converts (4300)
            raise PlanError(f"plan {path} holds a number too long to read ({exc}); no plan field takes one: "
                            "recompile it with hoccl-compile") from None
        if isinstance(data, dict) and data.get("encoding") == "pattern-1":
            return load_pattern(data, source=f"plan {path}")
    return plan_from_json(raw, source=str(path))


# peak memory while a plan's JSON is decoded: about 8 bytes per byte of JSON (a 3 MB All-to-All of 128 GPUs: 23 MB)
# and 3.3 KB per stage object (1.5 M empty stages in 243 MB of JSON: 5.2 GB); CPU VM, 2026-12-02
JSON_DECODE_BYTES_PER_BYTE = 8
JSON_DECODE_BYTES_PER_STAGE = 3072


def check_json_memory(raw: bytes | str, source: str) -> None:
    """Refuse, before decoding, a plan whose JSON would take more memory than the budget (``HOCCL_MAX_PLAN_MEMORY``,
    default half of this machine's memory): a small gzip file may inflate to a plan of millions of stages."""
    stages = raw.count(b'"transfers"' if isinstance(raw, bytes) else '"transfers"')
    need = len(raw) * JSON_DECODE_BYTES_PER_BYTE + stages * JSON_DECODE_BYTES_PER_STAGE
    budget = decode_budget()
    if need > budget:
        raise PlanError(f"plan {source}: {len(raw) / 1e6:,.1f} MB of JSON with {stages:,} stages would take about "
                        f"{need / 2**30:,.1f} GiB to decode, over the {budget / 2**30:.1f} GiB allowed "
                        "(HOCCL_MAX_PLAN_MEMORY, default half of this machine's memory); a plan that size is written "
                        "compact (hoccl-compile --encoding compact), or raise the setting")


def plan_from_json(raw: bytes | str, source: str = "<plan>") -> Plan:
    check_json_memory(raw, source)
    try:
        head = json.loads(raw)
    except RecursionError:
        raise PlanError(f"plan {source} nests too deeply to be a HOCCL plan") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PlanError(f"plan {source} is not valid JSON ({exc}); it may be truncated or corrupt: "
                        "recompile it with hoccl-compile") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise PlanError(f"plan {source} holds a number too long to read ({exc}); no plan field takes one: "
                        "recompile it with hoccl-compile") from None
    if not isinstance(head, dict) or "schema_version" not in head:
        raise PlanError(f"{source} is not a HOCCL plan (no schema_version field)")
    version = head["schema_version"]
    if version != SCHEMA_VERSION:
        raise PlanError(f"plan {source} has schema_version {version!r} but this HOCCL reads version "
                        f"{SCHEMA_VERSION}; recompile it with this version's hoccl-compile")
    if head.get("encoding") == "pattern-1":
        from .pattern import expand, load_pattern

        return expand(load_pattern(head, source=f"plan {source}"))
    if "encoding" in head:
        from .compact import ENCODING, from_compact

        if head["encoding"] != ENCODING:
            raise PlanError(f"plan {source} has encoding {head['encoding']!r}; this HOCCL reads the full encoding "
                            f"and {ENCODING!r}: recompile it with this version's hoccl-compile")
        return from_compact(head, source=f"plan {source}")
    try:
        plan = Plan.model_validate(head)
    except ValidationError as exc:
        raise PlanError(f"plan {source} does not match the plan schema: {schema_problems(exc)}") from None
    check_plan_id(head, plan_id_for(plan.topology, plan.collective, plan.options), f"plan {source}")
    return plan
