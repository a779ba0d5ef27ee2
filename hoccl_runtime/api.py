"""The communicators' one call set: what :func:`hoccl_runtime.init` returns, whichever communicator it is.

``Communicator`` (one node, copy engines), ``NetCommunicator`` (one GPU per node) and ``NodeNetCommunicator``
(several GPUs per node) all implement :class:`CommunicatorAPI`. Every call takes its buffers (CuPy arrays, torch
tensors, anything with ``__cuda_array_interface__``) and an explicit ``stream`` and returns at once; the result is
ready for later work on that stream. A call or option a communicator cannot honour raises
:class:`~hoccl_runtime.errors.UnsupportedOpError` naming it and what to do instead (never a ``TypeError``).

``pairs_alone`` tells how a communicator runs pairwise transfers: True where two ranks may exchange without the
others (one node: the hoccl torch backend then moves a collective's blocks straight into the caller's tensors),
False where every call is a collective of all ranks (across nodes). ``any_stream`` tells whether the calls may
come on any stream (True) or on one stream per communicator (False: several GPUs per node, whose START/DONE flags
in the node's shared memory are one pair per rank). ``windows_help`` tells whether a call on a registered window
(``register_window``) gains from it (True on one node: no per-call address exchange; False across nodes, where calls
stage through the transport's rings: ``use_for_fsdp`` then makes no window).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from .errors import UnsupportedOpError

__all__ = ["CommunicatorAPI", "CALLS", "unsupported"]

CALLS = ("all_gather_into_tensor", "all_to_all_single", "all_to_all_v", "broadcast", "scatter", "gather", "send",
         "recv", "batch_isend_irecv", "execute", "register_window", "synchronize", "close")


@runtime_checkable
class CommunicatorAPI(Protocol):
    rank: int
    world: int
    device: int
    pairs_alone: ClassVar[bool]
    any_stream: ClassVar[bool]
    windows_help: ClassVar[bool]

    def all_gather_into_tensor(self, output: Any, input: Any, stream: Any = None, *, rate_gbps: float | None = None,
                               duration_s: float | None = None) -> None: ...

    def all_to_all_single(self, output: Any, input: Any, stream: Any = None, *, rate_gbps: float | None = None,
                          duration_s: float | None = None) -> None: ...

    def all_to_all_v(self, output: Any, input: Any, output_split_bytes: Any, input_split_bytes: Any,
                     stream: Any = None) -> None: ...

    def broadcast(self, tensor: Any, root: int, stream: Any = None, *, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None: ...

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None: ...

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None, *,
               rate_gbps: float | None = None, duration_s: float | None = None) -> None: ...

    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None: ...

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None: ...

    def batch_isend_irecv(self, ops: list[tuple[str, Any, int]], stream: Any = None) -> None: ...

    def execute(self, plan: Any, input: Any, output: Any, stream: Any = None, *, rate_gbps: float | None = None,
                duration_s: float | None = None) -> None: ...

    def register_window(self, tensor: Any) -> Any: ...

    def synchronize(self, timeout_s: float | None = None) -> None: ...

    def close(self) -> None: ...


def unsupported(who: str, what: str, instead: str) -> UnsupportedOpError:
    """The error for a call or option ``who`` cannot honour."""
    return UnsupportedOpError(f"{who}: {what} is not supported here; {instead}")
