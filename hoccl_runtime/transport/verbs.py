"""RDMA verbs through rdma-core's pyverbs: what this build has is device discovery, with the clear
"no RDMA device, use TCP" answer every machine here gives. The verbs data path (RC queue pairs
exchanged over the bootstrap store, staging regions registered once, RDMA write with immediate,
completion-channel polling) is the next step; nothing of it has run on an RDMA NIC.

Installing pyverbs (what we found, 2026-11-30):

* Debian's ``python3-pyverbs`` (rdma-core 44): ``apt-get install python3-pyverbs``. It imports from
  the system Python and, for the same Python version, from a virtual environment through
  ``/usr/lib/python3/dist-packages`` (this module adds that path when ``import pyverbs`` fails).
* PyPI's ``pyverbs`` is an unofficial sdist that builds rdma-core: it fails with Cython 3.3, builds
  with Cython 3.0.12 and ``--no-build-isolation``, then needs rdma-core 59's libibverbs at run time.
* The enums moved: ``pyverbs.enums`` up to rdma-core 58, ``pyverbs.libibverbs_enums`` from 59.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from ..errors import TransportError

__all__ = ["import_pyverbs", "verbs_enums", "rdma_devices", "require_rdma_device"]

SYSTEM_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
NO_DEVICE_ADVICE = ("use the TCP transport instead (hoccl_runtime.transport.TcpTransport), which runs over any IP "
                    "network")


def import_pyverbs() -> ModuleType:
    """``pyverbs``, from this environment or from Debian's system packages; TransportError if absent."""
    try:
        return importlib.import_module("pyverbs")
    except ImportError:
        pass
    if SYSTEM_DIST_PACKAGES not in sys.path:
        sys.path.append(SYSTEM_DIST_PACKAGES)
        try:
            return importlib.import_module("pyverbs")
        except ImportError:
            pass
        finally:
            sys.path.remove(SYSTEM_DIST_PACKAGES)
    raise TransportError("pyverbs (rdma-core's Python bindings) is not installed: apt-get install python3-pyverbs, "
                         f"or pip install 'hoccl[rdma]' (see hoccl_runtime/transport/verbs.py); or {NO_DEVICE_ADVICE}")


def verbs_enums(pyverbs: ModuleType | None = None) -> ModuleType:
    """The enum module under its name for this rdma-core: ``libibverbs_enums`` (>= 59) or ``enums``."""
    pyverbs = pyverbs or import_pyverbs()
    for name in ("libibverbs_enums", "enums"):
        try:
            return importlib.import_module(f"{pyverbs.__name__}.{name}")
        except ImportError:
            continue
    raise TransportError(f"pyverbs at {getattr(pyverbs, '__file__', '?')} has neither libibverbs_enums nor enums")


def rdma_devices(pyverbs: ModuleType | None = None) -> list[str]:
    """Names of the RDMA devices the kernel exposes; [] when it has none (or no RDMA support at all)."""
    pyverbs = pyverbs or import_pyverbs()
    device = importlib.import_module(f"{pyverbs.__name__}.device")
    try:
        devices = device.get_device_list()
    except Exception as exc:  # noqa: BLE001 - pyverbs raises PyverbsRDMAError without kernel support
        if "device" in str(exc).lower():
            return []
        raise TransportError(f"listing RDMA devices failed: {exc}") from None
    names = []
    for d in devices:
        name = getattr(d, "name", d)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def require_rdma_device(name: str | None = None) -> str:
    """The RDMA device to use (``name`` or the first one), or a TransportError that says to use TCP."""
    names = rdma_devices()
    if not names:
        raise TransportError(f"no RDMA device on this machine (the kernel lists none: no NIC or no RDMA support); "
                             f"{NO_DEVICE_ADVICE}")
    if name is None:
        return names[0]
    if name not in names:
        raise TransportError(f"RDMA device {name!r} not found; this machine has {', '.join(names)}")
    return name
