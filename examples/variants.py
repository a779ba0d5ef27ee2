"""The training examples' communication variants with HOCCL settings of their own, to compare settings in one run.

``--comm hoccl,hoccl+HOCCL_NET_CHUNK_BYTES=8388608,nccl``: every ``hoccl+NAME=VALUE[+NAME=VALUE...]`` variant gets a
hoccl group of its own, made while those ``HOCCL_*`` settings are in the environment (a group's communicator and
its proxy process read them when the group is made), and trains its own model in the same interleaved rounds as
the others. Single invocations of one setting each could not separate settings on the 1x H200: NCCL's own 1 MiB
AllGather ran 0.72-1.10 ms across invocations there (docs/results/training-history.md, 2026-12-04), while the
ratio within a run is what counts.

An example may take options of its own in the same place (``OPTIONS``, lower case, on other bases too):
``train_fsdp.py --comm hoccl+prefetch=2,nccl+prefetch=2`` (FSDP2's explicit prefetch), ``hoccl+window=0`` (the
bytes of ``use_for_fsdp``'s window: 0 for none). They are not put in the environment; :func:`options` reads them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

__all__ = ["split", "options", "settings", "check"]

# the examples' own per-variant options (lower case, beside the HOCCL_* settings): name -> (type, bases it applies to,
# the least value)
OPTIONS = {"prefetch": (int, ("hoccl", "hoccl-onegroup", "nccl", "nccl-ce"), 1),
           "window": (int, ("hoccl", "hoccl-onegroup"), 0)}


def split(variant: str, bases: Sequence[str], opts: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """(base, settings) of ``variant``: ``hoccl+HOCCL_NET_LANES=4`` is ("hoccl", {"HOCCL_NET_LANES": "4"}). Raises
    ValueError naming what is wrong (an unknown base, a setting that is not a HOCCL_* one, settings on a non-hoccl
    variant, an example option of ``OPTIONS`` that is not in ``opts`` or not valid)."""
    from hoccl_runtime.settings import SETTINGS

    base, *pairs = variant.split("+")
    if base not in bases:
        raise ValueError(f"--comm {variant!r}: choose from {', '.join(bases)}, each once")
    env: dict[str, str] = {}
    options(variant)  # its example options are valid
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if name in OPTIONS and name not in opts:
            raise ValueError(f"--comm {variant!r}: this example has no {name}= option")
        if name in opts:
            continue
        if base != "hoccl" or not sep or name not in SETTINGS:
            raise ValueError(f"--comm {variant!r}: after hoccl+ give HOCCL settings as NAME=VALUE (docs/settings.md), "
                             "e.g. hoccl+HOCCL_NET_CHUNK_BYTES=8388608")
        env[name] = value
    return base, env


def options(variant: str) -> dict[str, int]:
    """The example options of ``variant``: ``nccl+prefetch=2`` is {"prefetch": 2}. Raises ValueError naming a value
    that is not of the option's type or a base the option does not apply to."""
    base, *pairs = variant.split("+")
    out: dict[str, int] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in OPTIONS:
            continue
        kind, applies, least = OPTIONS[name]
        if base not in applies:
            raise ValueError(f"--comm {variant!r}: {name}= applies to {', '.join(applies)}, not {base}")
        try:
            out[name] = kind(value)
        except ValueError:
            raise ValueError(f"--comm {variant!r}: {name}={value!r} is not a whole number; "
                             f"e.g. {base}+{name}=2") from None
        if out[name] < least:
            raise ValueError(f"--comm {variant!r}: {name}={value} must be {least} or more")
    return out


def check(variants: Sequence[str], bases: Sequence[str], opts: Sequence[str] = ()) -> str | None:
    """Why ``variants`` (``--comm``'s list) cannot run, or None: each a known base, with valid settings, once."""
    if not variants:
        return f"--comm: give one or more of {', '.join(bases)}"
    for v in variants:
        try:
            split(v, bases, opts)
        except ValueError as exc:
            return str(exc)
    if len(set(variants)) != len(variants):
        return f"--comm {','.join(variants)}: name each once"
    return None


@contextlib.contextmanager
def settings(env: dict[str, str]) -> Iterator[None]:
    """``env`` in os.environ for the block (a variant's group is made in it), the earlier values back after."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
