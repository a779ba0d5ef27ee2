"""Probe: does a host thread that sees a stream memory write (``cuStreamBatchMemOp`` WRITE_VALUE_32, as the
network communicators' START flag) find the writes of the kernel just before it in the stream complete?

One GPU, one process. Per trial: stream A runs a spin kernel, then a kernel filling a buffer with the trial's
number, then writes the flag. The host polls the flag, then copies the buffer's last element on another stream
(as the proxy's copies do), either at once ("flag only") or after waiting on the GPU for an event recorded on A
just before the write ("flag + event", what the communicators do now). Also counted: how often the event was not
yet complete when the host saw the flag. A third variant waits for the flag on the GPU (a second stream's
WAIT_VALUE_32 before its copy: the intra-node communicator's kind of order).

    python -m hoccl_bench.memop_order [--trials 200] [--mib 256]
"""

from __future__ import annotations

import argparse
import json


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--mib", type=int, default=256, help="buffer the kernel fills (MiB)")
    ap.add_argument("--spin", type=int, default=200_000, help="cycles of the spin kernel before the fill")
    args = ap.parse_args(argv)

    import torch

    from hoccl_runtime.flags import FlagPool, MemOps

    torch.cuda.init()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(args.mib << 18, dtype=torch.float32, device="cuda")  # MiB * 2^20 / 4
    host = torch.empty(1, dtype=torch.float32, pin_memory=True)
    pool = FlagPool(2)
    flag = pool.allocate()
    results = {}
    for variant in ("flag only", "flag + event", "GPU-side wait"):
        stale = early = 0
        for i in range(1, args.trials + 1):
            flag.write(0)
            torch.cuda.synchronize()
            ev = torch.cuda.Event()
            if variant == "GPU-side wait":
                MemOps().wait_eq(flag, 1).enqueue(b.cuda_stream)
                with torch.cuda.stream(b):
                    host.copy_(x[-1:], non_blocking=True)
            with torch.cuda.stream(a):
                torch.cuda._sleep(args.spin)
                x.fill_(float(i))
                ev.record(a)
                MemOps().write(flag, 1).enqueue(a.cuda_stream)
            if variant != "GPU-side wait":
                while flag.read() != 1:
                    pass
                early += not ev.query()
                with torch.cuda.stream(b):
                    if variant == "flag + event":
                        b.wait_event(ev)
                    host.copy_(x[-1:], non_blocking=True)
            b.synchronize()
            stale += host.item() != float(i)
        torch.cuda.synchronize()
        results[variant] = {"trials": args.trials, "stale_reads": stale,
                            "event_incomplete_when_flag_seen": early if variant != "GPU-side wait" else None}
    pool.close()
    print(f"{'variant':<16} {'trials':>6} {'stale reads':>12} {'event not done at flag':>23}")
    for k, v in results.items():
        e = v["event_incomplete_when_flag_seen"]
        print(f"{k:<16} {v['trials']:>6} {v['stale_reads']:>12} {'-' if e is None else e:>23}")
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, **results}))
    return results


if __name__ == "__main__":
    main()
