"""Runtime errors: the compiler's hierarchy (``hoccl_compiler.errors``) plus what only a runtime meets."""

from __future__ import annotations

from hoccl_compiler.errors import CollectiveError, HocclError, PlanError, TopologyError

__all__ = ["HocclError", "PlanError", "TopologyError", "CollectiveError", "CudaError", "BufferError",
           "StreamError", "HocclTimeoutError", "TransportError", "UnsupportedPlanError", "UnsupportedOpError"]


class CudaError(HocclError, RuntimeError):
    """A CUDA driver or runtime call failed; the message names the call and the CUDA error."""


class BufferError(HocclError, ValueError):  # noqa: A001 - a HOCCL buffer error, not the builtin
    """A buffer is unusable: wrong size for the plan, on the CPU, not contiguous, wrong device, not IPC-capable."""


class StreamError(HocclError, ValueError):
    """A stream argument is not a CUDA stream HOCCL can use."""


class HocclTimeoutError(HocclError, TimeoutError):
    """A peer did not answer within the configured bound."""


class TransportError(HocclError, ConnectionError):
    """A network transport failed (peer gone, connection dropped, corrupt frame)."""


class UnsupportedPlanError(HocclError, NotImplementedError):
    """The plan needs a part of the runtime that this build does not have yet (e.g. inter-node transfers)."""


class UnsupportedOpError(HocclError, NotImplementedError):
    """A call or option that HOCCL does not do (a reduce op it cannot compute, ``recv`` from any source, ...);
    the message names it and what to use instead."""


GPU_NEEDS = "an NVIDIA GPU with driver 580 or newer and pip install 'hoccl[gpu,torch]' (CUDA 13 wheels)"
