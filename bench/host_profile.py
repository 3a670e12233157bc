#!/usr/bin/env python3
"""host_profile.py — where the host's time goes in one xent forward+backward call from PyTorch.

    python3 bench/host_profile.py [NxC[:bf16]] [--calls 100]

First, back to back (CUDA events, median of 5 rounds of 100 calls): `xent.cross_entropy(x,
t).backward()` against the fused plan's own kernels launched straight from Python (what a step
would take were the host free), and their ratio; then the same call with the C++ operator left
out (the Python path: an autograd.Function and ctypes launches). Then the host alone: the calls are queued behind
a long GPU sleep, so the host never waits for the GPU, and what cProfile reports is Python,
autograd and the launches alone. Prints the host time a call of xent, of eager PyTorch, and of
PyTorch's own floor for such a loss (an autograd.Function that allocates the loss and a gradient
as xent does, and launches nothing), the device allocations each made (a cudaMalloc inside the
loop is a host stall), then cProfile's top entries by own time. --calls stays well under what the
launch queue holds (on the H200, 400 queued xent calls, about 1600 launches, blocked the host on
the GPU; 200 did not).
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")))
from _timing import back_to_back_us  # noqa: E402 (bench/, the script's own folder, is on sys.path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="?", default="32768x4096")
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args()
    import torch
    import xent
    dims, _, dt = args.shape.partition(":")
    n, c = (int(v) for v in dims.split("x"))
    dtype = {"": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    x = torch.randn(n, c, device="cuda").to(dtype).requires_grad_(True)
    t = torch.randint(0, c, (n,), device="cuda")

    def call():
        xent.cross_entropy(x, t).backward()
        x.grad = None

    from xent import _ops

    def python_path():  # the same call with the C++ operator (libxent_torch.so) left out
        cpp, _ops._cpp = _ops._cpp, False
        try:
            call()
        finally:
            _ops._cpp = cpp

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp):
            grad = torch.empty_like(inp)
            ctx.save_for_backward(grad)
            return inp.new_empty((), dtype=torch.float32)

        @staticmethod
        def backward(ctx, dloss):
            return ctx.saved_tensors[0]

    def floor():
        Floor.apply(x).backward()
        x.grad = None

    def eager():
        torch.nn.functional.cross_entropy(x, t).backward()
        x.grad = None

    for _ in range(5):
        call()
        python_path()
    torch.cuda.synchronize()
    g = torch.empty_like(x)

    def kernels():  # the fused plan's kernels on the same inputs, no autograd and no checks
        _ops._fused_impl(x, t, None, -100, 2, 0.0, 0.0, 0.0, False, g)

    step, own = back_to_back_us(torch, call, 100), back_to_back_us(torch, kernels, 100)
    py = back_to_back_us(torch, python_path, 100)
    print("back to back: xent.cross_entropy(x, t).backward() %.1f us a call (%s), the fused kernels alone %.1f "
          "us: %.3fx; the Python path %.1f us, %.3fx" % (step, "C++ operator" if _ops._cpp else "Python path, "
                                                         "no libxent_torch.so", own, step / own, py, py / own))
    for label, fn in (("xent", call), ("xent, Python path", python_path), ("autograd floor", floor),
                      ("torch eager", eager)) * 2:
        fn()
        torch.cuda.synchronize()
        mallocs = torch.cuda.memory_stats().get("num_device_alloc", 0)
        torch.cuda._sleep(int(2e9))
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        host = (time.perf_counter() - t0) * 1e6 / args.calls
        mallocs = torch.cuda.memory_stats().get("num_device_alloc", 0) - mallocs
        print("%s: %.1f us of host time a call, %d device allocations in %d calls" % (label, host, mallocs,
                                                                                     args.calls))
        torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
