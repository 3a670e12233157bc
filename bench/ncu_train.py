#!/usr/bin/env python3
"""ncu_train.py — xent's fused forward+backward for one shape, a few times, so that Nsight Compute
can read the counters of the rows kernel (xent_grad) on the plan a user gets:

    ncu --clock-control none -k regex:'^xent_grad$' --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats ... python3 bench/ncu_train.py 32768x4096:bf16

The plan comes from the lookup (the shipped cache unless XENT_DATADIR or XENT_TUNECACHE say otherwise).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", help="NxC[:fp32|bf16|fp16]")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    import torch
    import xent
    dims, _, dt = args.shape.partition(":")
    n, c = (int(v) for v in dims.split("x"))
    dtype = {"": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, c, device="cuda", generator=g).to(dtype).requires_grad_(True)
    t = torch.randint(0, c, (n,), device="cuda", generator=g)
    for _ in range(args.calls):
        xent.cross_entropy(x, t).backward()
        x.grad = None
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
