"""Session 48: keep the GPU's SMs busy for SECONDS (bf16 matmuls of 4096 x 4096 back to back, a sync every 20), as a
training process beside the one measured would. Usage: python busy.py SECONDS"""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
    n += 20
print(f"busy.py: {n} matmuls in {seconds:g} s")
