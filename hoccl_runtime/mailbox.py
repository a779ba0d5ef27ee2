"""The one mailbox slot of the communicators' shared host memory: what a rank publishes of a call for another
process to read (the intra-node :class:`~hoccl_runtime.comm.Communicator`: for each partner; the node leader of
:class:`~hoccl_runtime.comm.nodenet.NodeNetCommunicator`: for its leader), as named fields of int64 words.

A writer fills every field it uses, then ``seq`` last; a reader that sees ``seq`` reads the rest. Fields a
communicator does not use stay 0. Handles are CUDA IPC handles (64 bytes: 8 words).

=================  =====  =================================================================================
field              words  meaning
=================  =====  =================================================================================
``seq``            1      the call's number (between the two ranks, or on the node); written last
``digest``         1      a CRC of the call's plan: a reader in another collective raises PlanError
``device``         1      the writer's GPU (the node leader maps the buffers in that GPU's context)
``out_kind``       1      ``NONE``, ``HANDLE`` (``out_handle`` + ``out_offset``) or ``WINDOW`` (window
                          ``window`` at ``out_offset``)
``out_offset``     1      the output's offset in its allocation (or window)
``out_bytes``      1      the output's size (the node leader; the Communicator knows it from the plan)
``window``         1      the registered window the output lies in (``out_kind == WINDOW``)
``in_kind``        1      ``NONE`` or ``HANDLE``: the input is published too (``in_handle`` + ``in_offset``)
``in_offset``      1      the input's offset in its allocation
``in_bytes``       1      the input's size (the node leader)
``out_handle``     8      the output allocation's IPC handle
``in_handle``      8      the input allocation's IPC handle
``event_handle``   8      an IPC event recorded where the call sits in the writer's stream (the node leader)
=================  =====  =================================================================================
"""

from __future__ import annotations

__all__ = ["SLOT", "Fields", "NONE", "HANDLE", "WINDOW", "HANDLE_BYTES"]

HANDLE_BYTES = 64  # cudaIpcMemHandle_t, cudaIpcEventHandle_t
NONE, HANDLE, WINDOW = 0, 1, 2  # out_kind / in_kind


class Fields:
    """Word offsets of a record's fields (attributes named as the fields), from (name, words) pairs in order;
    ``words`` is the record's length."""

    def __init__(self, *fields: tuple[str, int]):
        at = 0
        self.names: tuple[str, ...] = tuple(name for name, _ in fields)
        for name, n in fields:
            setattr(self, name, at)
            at += n
        self.words = at

    def span(self, slot: int, field: str, nbytes: int = HANDLE_BYTES) -> slice:
        """The bytes of field ``field`` (a handle) of the record at word ``slot``, as a slice of the memory."""
        start = 8 * (slot + getattr(self, field))
        return slice(start, start + nbytes)


SLOT = Fields(("seq", 1), ("digest", 1), ("device", 1), ("out_kind", 1), ("out_offset", 1), ("out_bytes", 1),
              ("window", 1), ("in_kind", 1), ("in_offset", 1), ("in_bytes", 1), ("out_handle", 8), ("in_handle", 8),
              ("event_handle", 8))
