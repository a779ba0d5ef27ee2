"""Human byte sizes: ``parse_size("1GiB")`` and ``format_bytes(2**30)``."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["parse_size", "format_bytes"]

_UNITS = {
    "": 1, "b": 1,
    # K / M / G / T alone are powers of 1024, as nccl-tests reads them (-b 1G is 2**30); KB / MB / GB / TB are SI
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


MAX_BYTES = 1 << 60  # 1 EiB: any size beyond is a typo (and would overflow the plan's int64 offsets)
MAX_TOTAL_BYTES = 1 << 61  # 2 EiB over all ranks' outputs: with the forwarding copies (each byte up to 3 times in
# the HOCCL matrix) every sum of a plan's byte counts stays inside int64


def byte_sums(keys, nbytes, length: int) -> np.ndarray:
    """Per key in 0..length-1, the sum of its ``nbytes``, exact in int64 (np.bincount sums in float64, which
    loses bytes above 2**53: 8 PiB)."""
    out = np.zeros(length, np.int64)
    np.add.at(out, np.asarray(keys, np.int64), np.asarray(nbytes, np.int64))
    return out


def parse_size(text: str | int) -> int:
    """Parse ``"1GiB"``, ``"512 MiB"``, ``"4k"`` or ``"1000"`` into a byte count.

    KiB/MiB/GiB and K/M/G alone (as nccl-tests reads ``-b 1G``) are powers of 1024, KB/MB/GB powers of 1000.
    """
    if isinstance(text, bool):
        raise ValueError(f"size {text!r} is a boolean; give a byte count")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size {text} is negative; give a byte count >= 0")
        if text > MAX_BYTES:
            raise ValueError(f"size {text} is larger than 1 EiB ({MAX_BYTES} bytes); give a real buffer size")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"cannot read size {text!r}; write it like 1GiB, 512MiB, 4KiB or 1000")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r} in {text!r}; use B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) "
                         "or KB, MB, GB, TB (of 1000)")
    value = float(number) * factor
    if not value <= MAX_BYTES:  # also inf and nan
        raise ValueError(f"size {text!r} is larger than 1 EiB ({MAX_BYTES} bytes); give a real buffer size")
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes ({value})")
    return int(value)


def format_bytes(n: int | float) -> str:
    """``2**30 -> '1 GiB'``, ``1536 -> '1.5 KiB'``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            text = f"{n:.2f}".rstrip("0").rstrip(".") if unit != "B" else f"{int(n)}"
            return f"{text} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def chain_depth(link: np.ndarray) -> np.ndarray:
    """Per entry, how many entries precede it along ``link`` (each entry's predecessor, or -1; acyclic): a
    transfer's waits, a forwarded flow's ``via``."""
    depth = np.zeros(link.size, np.int64)
    nxt = np.asarray(link, np.int64).copy()
    while (nxt >= 0).any():
        has = nxt >= 0
        depth[has] += 1
        nxt[has] = link[nxt[has]]
    return depth
