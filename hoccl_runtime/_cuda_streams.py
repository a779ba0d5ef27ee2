"""The CUDA door for streams, events and graphs: each wrapper calls CuPy's runtime binding and raises
:class:`~hoccl_runtime.errors.CudaError` naming the CUDA call where CuPy's own error would escape the hierarchy
(:mod:`hoccl_runtime._cuda` holds the door's base: the driver, CuPy's runtime, devices, host memory)."""

from __future__ import annotations

from ._cuda import runtime_call as _call

__all__ = ["event_create", "event_record", "event_destroy", "event_query", "event_elapsed_ms", "stream_wait_event",
           "stream_is_capturing", "stream_synchronize", "begin_capture", "end_capture", "graph_instantiate",
           "graph_destroy", "graph_exec_destroy", "EVENT_NOT_READY"]

EVENT_NOT_READY = 600  # cudaErrorNotReady: what event_query answers for an event its stream has not reached


def event_create(timing: bool = False, interprocess: bool = False) -> int:
    """A new event on the current device (``cudaEventDisableTiming`` unless ``timing``; ``cudaEventInterprocess``
    with ``interprocess``, which needs timing off)."""
    return int(_call("eventCreateWithFlags", "cudaEventCreateWithFlags", (0 if timing else 2) | (4 if interprocess
                                                                                                else 0)))


def event_record(event: int, stream: int) -> None:
    _call("eventRecord", "cudaEventRecord", event, stream)


def event_destroy(event: int) -> None:
    _call("eventDestroy", "cudaEventDestroy", event)


def event_query(event: int) -> int:
    """0 when the event's work is done, EVENT_NOT_READY while it is not (CUDA's status code)."""
    return int(_call("eventQuery", "cudaEventQuery", event))


def event_elapsed_ms(start: int, end: int) -> float:
    return float(_call("eventElapsedTime", "cudaEventElapsedTime", start, end))


def stream_wait_event(stream: int, event: int) -> None:
    _call("streamWaitEvent", "cudaStreamWaitEvent", stream, event, 0)


def stream_is_capturing(stream: int) -> bool:
    return _call("streamIsCapturing", "cudaStreamIsCapturing", stream) != 0


def stream_synchronize(stream: int) -> None:
    _call("streamSynchronize", "cudaStreamSynchronize", stream)


def begin_capture(stream: int, mode: int = 1) -> None:
    """Start capturing ``stream`` into a graph (mode 1: cudaStreamCaptureModeThreadLocal)."""
    _call("streamBeginCapture", "cudaStreamBeginCapture", stream, mode)


def end_capture(stream: int) -> int:
    return _call("streamEndCapture", "cudaStreamEndCapture", stream)


def graph_instantiate(graph: int) -> int:
    return _call("graphInstantiate", "cudaGraphInstantiate", graph)


def graph_destroy(graph: int) -> None:
    _call("graphDestroy", "cudaGraphDestroy", graph)


def graph_exec_destroy(exe: int) -> None:
    _call("graphExecDestroy", "cudaGraphExecDestroy", exe)
