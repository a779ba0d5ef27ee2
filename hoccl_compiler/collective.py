"""Collective descriptions and their exact byte layout.

:func:`layout` is the single statement of what each collective means: for every
(source rank, destination rank) pair, which bytes of the source's input buffer land where in the
destination's output buffer. The traffic pass builds flows from it and the verifier checks a plan's
replayed writes against it.

Buffer conventions follow NCCL / nccl-tests (``size`` is the per-rank buffer nccl-tests prints):

=========== ====================================== ==========================================
collective  input bytes per rank                    output bytes per rank
=========== ====================================== ==========================================
allgather   size / G                                size (block u from rank u)
alltoall    size (block v goes to rank v)           size (block u came from rank u)
alltoallv   row sum of the matrix (blocks by dst)   column sum (blocks by src)
matrix      as alltoallv                            as alltoallv
broadcast   size on the root, 0 elsewhere           size
scatter     size on the root, 0 elsewhere           size / G
gather      size / G                                size on the root, 0 elsewhere
sendrecv    sum of the rank's sends, in list order  sum of its receives, in list order
=========== ====================================== ==========================================
"""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .errors import CollectiveError
from .units import MAX_BYTES, MAX_TOTAL_BYTES

__all__ = [
    "CollectiveKind",
    "CollectiveSpec",
    "Layout",
    "layout",
    "REDUCTIONS",
    "refuse_reduction",
    "check_root",
    "load_matrix",
    "load_pairs",
]

CollectiveKind = Literal["allgather", "alltoall", "alltoallv", "matrix", "broadcast", "scatter", "gather", "sendrecv"]
KINDS: tuple[str, ...] = ("allgather", "alltoall", "alltoallv", "matrix", "broadcast", "scatter", "gather",
                          "sendrecv")
REDUCTIONS = ("allreduce", "reducescatter", "reduce_scatter", "reduce")
IN_PLACE_KINDS = ("allgather", "broadcast", "gather")


def refuse_reduction(kind: str) -> CollectiveError:
    """The error for a reduction: a DMA copy engine moves bytes but cannot add them."""
    advice = {
        "allreduce": "run all_reduce through NCCL (torch.distributed.all_reduce), or compile an alltoall "
                     "(reduce-scatter phase) and allgather around your own local sum",
        "reducescatter": "run reduce_scatter through NCCL, or compile an alltoall and sum the received blocks "
                         "with a local kernel",
        "reduce": "run reduce through NCCL, or compile a gather to the root and sum there",
    }
    key = "reducescatter" if kind == "reduce_scatter" else kind
    return CollectiveError(
        f"{kind} is a reduction: it needs arithmetic, and a DMA copy engine can only copy bytes. "
        f"HOCCL schedules data movement only; {advice[key]}."
    )


class CollectiveSpec(BaseModel):
    """What the user asked for. Exactly one of ``size_bytes``, ``matrix`` or ``pairs`` carries the sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: CollectiveKind
    size_bytes: int | None = Field(default=None, ge=0, le=1 << 60, strict=True)
    root: int | None = Field(default=None, ge=0, strict=True)
    matrix: tuple[tuple[int, ...], ...] | None = None
    pairs: tuple[tuple[int, int, int], ...] | None = None
    in_place: bool = False

    def describe(self) -> str:
        from .units import format_bytes

        text = self.kind
        if self.size_bytes is not None:
            text += f" {format_bytes(self.size_bytes)}"
        if self.root is not None:
            text += f" root {self.root}"
        if self.matrix is not None:
            total = sum(sum(row) for row in self.matrix)
            text += f" ({len(self.matrix)}x{len(self.matrix)} matrix, {format_bytes(total)} in all)"
        if self.pairs is not None:
            text += f" ({len(self.pairs)} pair(s))"
        if self.in_place:
            text += " in place"
        return text


@dataclass(frozen=True)
class Layout:
    """Byte layout of a collective on ``G`` ranks.

    Every block is one (src, dst) pair: ``bytes`` bytes read at ``src_offset`` of src's input and
    written at ``dst_offset`` of dst's output. Blocks are sorted by (src, dst); pairs with 0 bytes
    are absent; local blocks (src == dst) are present unless the collective runs in place.
    """

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray
    input_bytes: np.ndarray
    output_bytes: np.ndarray
    # In place, a rank's input already sits inside its output: [resident_offset, +resident_bytes)
    # of the output holds the input from byte 0 on, with no copy (0 bytes when not in place).
    resident_offset: np.ndarray | None = None
    resident_bytes: np.ndarray | None = None
    # Multicast routing (hoccl_compiler.multicast): per flow, the flow whose destination's output it reads its
    # bytes from (-1: the source's input). None: every flow is direct, as the collective's own layout has it.
    via: np.ndarray | None = None

    def resident(self) -> tuple[np.ndarray, np.ndarray]:
        G = self.input_bytes.size
        if self.resident_offset is None or self.resident_bytes is None:
            return np.zeros(G, np.int64), np.zeros(G, np.int64)
        return self.resident_offset, self.resident_bytes


def _resident(G: int, ranks: np.ndarray, offsets: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off, size = np.zeros(G, np.int64), np.zeros(G, np.int64)
    off[ranks], size[ranks] = offsets, nbytes
    return off, size


def flow_count(spec: CollectiveSpec, G: int) -> int:
    """How many (source, destination) flows the collective has on ``G`` ranks, worked out from the spec alone (no
    G x G structure is built): what the compile's memory grows with."""
    if spec.kind in ("allgather", "alltoall"):
        return G * G
    if spec.kind in ("alltoallv", "matrix") and spec.matrix is not None:
        return sum(1 for row in spec.matrix for b in row if b)
    if spec.kind == "sendrecv" and spec.pairs is not None:
        return len(spec.pairs)
    return G  # broadcast, scatter, gather: one flow per rank


def _check_size_divisible(spec: CollectiveSpec, G: int) -> int:
    size = spec.size_bytes
    if size is None:
        raise CollectiveError(f"{spec.kind} needs a size; pass --size (e.g. --size 1GiB)")
    if size % G:
        lower, upper = size - size % G, size - size % G + G
        raise CollectiveError(
            f"{spec.kind} size {size} B is not a multiple of the {G} ranks (each rank's block must be whole); "
            + (f"use {lower} or {upper}" if lower else f"use {upper}, or another multiple of {G}")
        )
    return size // G


def check_root(root: int, G: int) -> int:
    """``root`` where it is a rank of ``G``, else a CollectiveError naming it and the range (the CLI asks before it
    builds a spec, whose own check refuses a negative root in pydantic's words)."""
    if not 0 <= root < G:
        raise CollectiveError(f"root {root} is out of range for {G} ranks; pick --root in 0..{G - 1}")
    return root


def _check_root(spec: CollectiveSpec, G: int) -> int:
    return check_root(spec.root if spec.root is not None else 0, G)


def _matrix_array(spec: CollectiveSpec, G: int) -> np.ndarray:
    if spec.matrix is None:
        raise CollectiveError(f"{spec.kind} needs a per-pair byte matrix; pass --matrix FILE (.npy, .csv or .json)")
    name = "byte matrix" if spec.kind == "matrix" else f"{spec.kind} byte matrix"
    try:
        mat = np.asarray(spec.matrix, dtype=np.int64)
    except OverflowError:
        raise CollectiveError(f"the {name} has an entry beyond a 64-bit integer; entries are byte "
                              f"counts of at most 1 EiB ({MAX_BYTES})") from None
    except ValueError:  # rows of different lengths
        raise CollectiveError(f"the {name}'s rows differ in length; give a {G}x{G} matrix") from None
    if mat.shape != (G, G):
        raise CollectiveError(
            f"the {name} is {mat.shape[0]}x{mat.shape[1] if mat.ndim == 2 else '?'} but the topology "
            f"has {G} GPUs; give a {G}x{G} matrix or change --nodes/--gpus-per-node"
        )
    if (mat < 0).any():
        u, v = map(int, np.argwhere(mat < 0)[0])
        raise CollectiveError(f"matrix[{u}][{v}] = {mat[u, v]} is negative; entries are byte counts >= 0")
    # each rank's input (its row) and output (its column) is one buffer of at most 1 EiB, as --size is (the sums
    # are exact: the whole matrix holds at most 2 EiB, _check_total)
    for axis, what in ((1, "input (its row"), (0, "output (its column")):
        sums = mat.sum(axis=axis)
        if sums.size and sums.max() > MAX_BYTES:
            r = int(sums.argmax())
            raise CollectiveError(f"rank {r}'s {what} of the matrix) would be {float(sums[r]):.3g} bytes, over 1 EiB "
                                  f"({MAX_BYTES}); give real byte counts")
    return mat


def _layout_from_matrix(mat: np.ndarray) -> Layout:
    """alltoallv layout: rank u's input holds its blocks by destination, rank v's output by source."""
    src_offset = np.cumsum(mat, axis=1) - mat  # row-wise exclusive prefix
    dst_offset = np.cumsum(mat, axis=0) - mat  # column-wise exclusive prefix
    src, dst = np.nonzero(mat)
    return Layout(
        src=src.astype(np.int64), dst=dst.astype(np.int64), bytes=mat[src, dst],
        src_offset=src_offset[src, dst], dst_offset=dst_offset[src, dst],
        input_bytes=mat.sum(axis=1), output_bytes=mat.sum(axis=0),
    )


def layout(spec: CollectiveSpec, G: int) -> Layout:
    """The exact byte layout of ``spec`` on ``G`` ranks (see the module docstring). Blocks of 0 bytes are left
    out, so a collective of size 0 has no flows (an empty, valid plan)."""
    _check_total(spec, G)
    lay = _layout(spec, G)
    keep = lay.bytes > 0
    if keep.all():
        return lay
    return dataclasses.replace(lay, src=lay.src[keep], dst=lay.dst[keep], bytes=lay.bytes[keep],
                               src_offset=lay.src_offset[keep], dst_offset=lay.dst_offset[keep])


def _check_total(spec: CollectiveSpec, G: int) -> None:
    """Refuse a collective whose bytes over all ranks exceed MAX_TOTAL_BYTES (2 EiB; G ranks of up to 1 EiB each
    could overflow the int64 sums of its layout and matrices), before anything is summed in int64."""
    if spec.size_bytes is not None:  # the size is each rank's buffer, or for scatter/gather the root's whole one
        total = float(spec.size_bytes) * ({"scatter": 1, "gather": 1, "sendrecv": max(G - 1, 1)}.get(spec.kind, G))
    elif spec.matrix is not None:
        total = sum(float(x) for row in spec.matrix for x in row)
    elif spec.pairs is not None:
        total = sum(float(n) for _, _, n in spec.pairs)
    else:
        return
    if total > MAX_TOTAL_BYTES:
        raise CollectiveError(f"{spec.kind} on {G} ranks would move {total:.3g} bytes in all, beyond the 2 EiB "
                              f"({MAX_TOTAL_BYTES} bytes) whose sums fit HOCCL's 64-bit byte counts; give real sizes")


def _layout(spec: CollectiveSpec, G: int) -> Layout:
    if spec.in_place and spec.kind not in IN_PLACE_KINDS:
        raise CollectiveError(f"{spec.kind} has no in-place form here; in-place is supported for "
                              f"{', '.join(IN_PLACE_KINDS)}")
    kind = spec.kind
    ranks = np.arange(G, dtype=np.int64)
    zeros = np.zeros(G, dtype=np.int64)
    if kind in ("alltoallv", "matrix"):
        return _layout_from_matrix(_matrix_array(spec, G))
    if kind == "sendrecv":
        return _sendrecv_layout(spec, G)
    if kind == "alltoall":
        if spec.size_bytes is None:
            raise CollectiveError("alltoall needs a size; pass --size (e.g. --size 1GiB)")
        block = _check_size_divisible(spec, G)
        return _layout_from_matrix(np.full((G, G), block, dtype=np.int64))
    if kind == "allgather":
        block = _check_size_divisible(spec, G)
        src, dst = np.repeat(ranks, G), np.tile(ranks, G)
        # In place: rank u's input already is block u of its output, so the local copy disappears.
        keep = src != dst if spec.in_place else np.ones(G * G, dtype=bool)
        src, dst = src[keep], dst[keep]
        res = _resident(G, ranks, ranks * block, np.full(G, block)) if spec.in_place else (None, None)
        return Layout(src, dst, np.full(src.size, block, np.int64), np.zeros(src.size, np.int64), src * block,
                      np.full(G, block, np.int64), np.full(G, block * G, np.int64), *res)
    if kind == "broadcast":
        root = _check_root(spec, G)
        size = spec.size_bytes
        if size is None:
            raise CollectiveError("broadcast needs a size; pass --size (e.g. --size 1GiB)")
        dst = ranks[ranks != root] if spec.in_place else ranks
        n = dst.size
        inp = zeros.copy()
        inp[root] = size
        res = _resident(G, np.array([root]), np.array([0]), np.array([size])) if spec.in_place else (None, None)
        return Layout(np.full(n, root, np.int64), dst, np.full(n, size, np.int64), np.zeros(n, np.int64),
                      np.zeros(n, np.int64), inp, np.full(G, size, np.int64), *res)
    if kind == "scatter":
        root = _check_root(spec, G)
        block = _check_size_divisible(spec, G)
        inp = zeros.copy()
        inp[root] = block * G
        return Layout(np.full(G, root, np.int64), ranks, np.full(G, block, np.int64), ranks * block,
                      np.zeros(G, np.int64), inp, np.full(G, block, np.int64))
    if kind == "gather":
        root = _check_root(spec, G)
        block = _check_size_divisible(spec, G)
        src = ranks[ranks != root] if spec.in_place else ranks
        out = zeros.copy()
        out[root] = block * G
        res = _resident(G, np.array([root]), np.array([root * block]), np.array([block])) if spec.in_place \
            else (None, None)
        return Layout(src, np.full(src.size, root, np.int64), np.full(src.size, block, np.int64),
                      np.zeros(src.size, np.int64), src * block, np.full(G, block, np.int64), out, *res)
    raise CollectiveError(f"unknown collective {kind!r}; choose one of {', '.join(KINDS)}")


def _sendrecv_layout(spec: CollectiveSpec, G: int) -> Layout:
    if spec.pairs is None:
        size = spec.size_bytes
        if size is None:
            raise CollectiveError("sendrecv needs --size for the default pipeline (i -> i+1) or --pairs FILE")
        if G < 2:
            raise CollectiveError("sendrecv needs at least 2 ranks; increase --nodes or --gpus-per-node")
        pairs = [(i, i + 1, size) for i in range(G - 1)]
    else:
        pairs = [tuple(int(x) for x in p) for p in spec.pairs]
    seen: set[tuple[int, int]] = set()
    for index, (s, d, n) in enumerate(pairs):
        if not (0 <= s < G and 0 <= d < G):
            raise CollectiveError(f"pair {index} ({s} -> {d}) names a rank outside 0..{G - 1}")
        if s == d:
            raise CollectiveError(f"pair {index} sends rank {s} to itself; a send/recv needs two ranks")
        if n < 0:
            raise CollectiveError(f"pair {index} ({s} -> {d}) has negative size {n}")
        if n > MAX_BYTES:
            raise CollectiveError(f"pair {index} ({s} -> {d}) has size {n}, over 1 EiB ({MAX_BYTES}); give a real "
                                  "byte count")
        if (s, d) in seen:
            raise CollectiveError(f"pair {index} repeats {s} -> {d}; merge repeated pairs into one transfer")
        seen.add((s, d))
    pairs = [p for p in pairs if p[2] > 0]
    in_used = np.zeros(G, np.int64)
    out_used = np.zeros(G, np.int64)
    rows = []
    for s, d, n in pairs:  # offsets in list order, as a pipeline stage lays out its sends/receives
        rows.append((s, d, n, in_used[s], out_used[d]))
        for used, r, what in ((in_used, s, "sends"), (out_used, d, "receives")):
            if int(used[r]) + n > MAX_BYTES:  # checked before the int64 sum could overflow
                raise CollectiveError(f"rank {r} {what} over 1 EiB ({MAX_BYTES} bytes) in all; give real byte counts")
            used[r] += n
    rows.sort()
    arr = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return Layout(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], in_used, out_used)


# --- input files -------------------------------------------------------------------------------------

def _load_npy(path: Path) -> np.ndarray:
    """An .npy array, its header checked against the file's size before anything is allocated."""
    import numpy.lib.format  # noqa: F401 - np.lib.format is a lazy submodule

    with path.open("rb") as fh:
        fmt = np.lib.format
        version = fmt.read_magic(fh)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(fh)
        if dtype.hasobject:
            raise CollectiveError(f"matrix file {path} holds Python objects; save a numeric array")
        count = 1
        for n in shape:
            count *= int(n)
        need = count * dtype.itemsize
        have = path.stat().st_size - fh.tell()
    if need > have:
        raise CollectiveError(f"matrix file {path}: its header claims shape {shape} of {dtype} ({need} bytes) but the "
                              f"file holds {have} bytes after it: the file is truncated or corrupt")
    return np.load(path, allow_pickle=False)


def _same_lengths(rows: list, path: Path) -> None:
    """Refuse a matrix file whose rows differ in length, naming the first that differs from row 0."""
    for i, row in enumerate(rows):
        if len(row) != len(rows[0]):
            raise CollectiveError(f"matrix file {path}: row {i} has {len(row)} entries and row 0 has {len(rows[0])}; "
                                  "give a square G x G matrix, every row G byte counts")


def _json_rows(rows: object, path: Path) -> list:
    """A JSON matrix's rows, each entry a number (not a bool, string, object or list)."""
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise CollectiveError(f"matrix file {path} must hold a list of rows, each a list of byte counts")
    _same_lengths(rows, path)
    for i, row in enumerate(rows):
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise CollectiveError(f"matrix file {path}: entry [{i}][{j}] is {json.dumps(x)[:40]}; give whole byte "
                                      "counts (integers)")
    return rows


def load_matrix(path: str | Path) -> tuple[tuple[int, ...], ...]:
    """A square byte matrix from .npy, .csv (comma-separated rows) or .json (list of rows)."""
    path = Path(path)
    try:
        if path.suffix == ".npy":
            mat = _load_npy(path)
        elif path.suffix == ".csv":
            with path.open(newline="") as fh:
                rows = [[float(x) for x in row if x.strip()] for row in csv.reader(fh) if row]
            _same_lengths(rows, path)
            mat = np.array(rows)
        elif path.suffix == ".json":
            mat = np.array(_json_rows(json.loads(path.read_text()), path), dtype=float)
        else:
            raise CollectiveError(f"matrix file {path} must end in .npy, .csv or .json")
    except CollectiveError:
        raise
    except (OSError, ValueError, TypeError, RecursionError, json.JSONDecodeError) as exc:
        raise CollectiveError(f"cannot read matrix file {path}: {exc}") from None
    if mat.dtype.kind not in "iuf":  # complex, bool, strings
        raise CollectiveError(f"matrix file {path} holds {mat.dtype} entries; give whole byte counts (integers)")
    if mat.ndim != 2 or mat.shape[0] != mat.shape[1]:
        raise CollectiveError(f"matrix file {path} holds shape {mat.shape}; it must be a square G x G matrix")
    if not np.all(np.isfinite(mat)) or np.any(mat != np.round(mat)):
        raise CollectiveError(f"matrix file {path} has entries that are not whole byte counts")
    if mat.size and np.abs(mat).max() > 1 << 60:
        raise CollectiveError(f"matrix file {path} has an entry of {np.abs(mat).max():.3g} bytes, over 1 EiB; give "
                              "real byte counts")
    return tuple(tuple(int(x) for x in row) for row in mat)


def _whole(value: object, path: Path, what: str) -> int:
    """A rank from a pairs file: a whole number (not a boolean, not 1.5)."""
    if isinstance(value, bool):
        raise CollectiveError(f"pairs file {path}: {what} {value!r} is a boolean; give a rank number")
    if isinstance(value, float) and not value.is_integer():
        raise CollectiveError(f"pairs file {path}: {what} {value!r} is not a whole rank number")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise CollectiveError(f"pairs file {path}: {what} {value!r} is not a rank number") from None


def load_pairs(path: str | Path) -> tuple[tuple[int, int, int], ...]:
    """Send/recv pairs from .json ([[src, dst, bytes], ...]) or .csv (src,dst,bytes rows, after an optional
    ``src,dst,bytes`` header; sizes may use units)."""
    from .units import parse_size

    path = Path(path)
    try:
        if path.suffix == ".json":
            rows = json.loads(path.read_text())
        elif path.suffix == ".csv":
            with path.open(newline="") as fh:
                rows = [row for row in csv.reader(fh) if row and not row[0].lstrip().startswith("#")]
            if rows and [c.strip().lower() for c in rows[0]] == ["src", "dst", "bytes"]:
                rows = rows[1:]  # a header row
        else:
            raise CollectiveError(f"pairs file {path} must end in .json or .csv")
        pairs = []
        if not isinstance(rows, list):
            raise CollectiveError(f"pairs file {path} must hold a list of [src, dst, bytes] rows")
        for row in rows:
            if not isinstance(row, (list, tuple)) or len(row) != 3:
                raise CollectiveError(f"pairs file {path}: row {row!r} must be [src, dst, bytes]")
            pairs.append((_whole(row[0], path, "src"), _whole(row[1], path, "dst"),
                          parse_size(str(row[2]).strip())))
        if not pairs:
            raise CollectiveError(f"pairs file {path} has no pairs; give at least one [src, dst, bytes] row")
    except CollectiveError:
        raise
    except (OSError, ValueError, RecursionError, json.JSONDecodeError) as exc:
        raise CollectiveError(f"cannot read pairs file {path}: {exc}") from None
    return tuple(pairs)
