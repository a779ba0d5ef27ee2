"""How long this VM takes to touch memory: 4 GiB of numpy ones, three times in a row, then after a pause.

Session 50: the 1024-GPU All-to-All compile spent 19-24 s of system time against 10.5 s of user time, and `perf`
put 63-67% of its samples in the kernel's clear_page (huge-page faults). This shows whether that is the compiler or
the machine: the same bytes, touched again right away, against after the VM has had time to hand freed pages back.
"""

import time

import numpy as np


def touch(label: str, n: int = 1 << 29) -> None:
    start = time.perf_counter()
    a = np.ones(n, np.int64)
    print(f"{label:40s} {a.nbytes / 2**30:.0f} GiB in {time.perf_counter() - start:6.2f} s", flush=True)
    del a


if __name__ == "__main__":
    for i in range(3):
        touch(f"touch {i + 1}, right after the last")
    time.sleep(30)
    touch("after 30 s asleep")
