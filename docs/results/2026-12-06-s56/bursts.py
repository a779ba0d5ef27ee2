"""Session 56: from run 1's trace (HOCCL_TCP_SPIN_US=2000, FSDP small under MPS, 1x H100), the 6.3 MB AllGathers
the proxy took within 50 us of finishing the call before (back to back: the proxy was the bottleneck there), and
where their time went. Usage: python bursts.py DIR (the folder with trace.rank{0,1}.csv from run1/logs-run1.tgz)."""
import csv
import statistics as st
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "."
for r in (0, 1):
    with open(f"{folder}/trace.rank{r}.csv") as fh:
        rows = list(csv.DictReader(fh))
    f = lambda x, k: float(x[k])  # noqa: E731
    taken = [f(x, "taken_us") for x in rows]
    copies = [f(x, "copies_us") for x in rows]
    busy = sum(c - a for a, c in zip(taken, copies, strict=True)) / (copies[-1] - taken[0])
    gaps = [taken[i + 1] - copies[i] for i in range(len(rows) - 1)]
    burst = [i for i in range(1, len(rows)) if gaps[i - 1] < 50 and rows[i]["call"].startswith("allgather 6304768")]
    svc = [copies[i] - taken[i] for i in burst]
    head = [f(rows[i], "staged_us") - taken[i] for i in burst]
    tail = [copies[i] - f(rows[i], "received_us") for i in burst]
    hello = [f(rows[i], "hello_us") - f(rows[i], "announced_us") for i in burst]
    print(f"rank {r}: {len(rows)} calls, the proxy busy {busy:.1%} of the run; {len(burst)} 6.3 MB AllGathers taken "
          f"within 50 us of the call before: taken -> copies through p50 {st.median(svc):.0f} us, taken -> staged "
          f"p50 {st.median(head):.0f}, its wait for the peer's previous run (hello) p50 {st.median(hello):.0f} mean "
          f"{st.mean(hello):.0f}, received -> copies through p50 {st.median(tail):.0f}")
