#!/usr/bin/env python3
"""copy_floor.py — how close a kernel on the SMs can come to the training floor, a device copy.

    python3 bench/copy_floor.py [NxC[:bf16] ...]   (default: the four training shapes)

The fused forward+backward reads the logits and writes a gradient of the same size; its floor in
docs/performance.md is a device-to-device cudaMemcpyAsync (the copy engines). This times that copy
beside the plainest copy kernels on the SMs: one-shot blocks of 256 threads, each thread ITEMS
(4 or 8) independent 16-byte ld.global.cs loads, then ITEMS stores (st.global or st.global.cs).
Back to back, median of 5 rounds of 20 calls, µs a call and the ratio to the device copy.
Needs CuPy.
"""
import sys

import cupy as cp
import numpy as np

SRC = r'''
extern "C" __global__ void __launch_bounds__(256) copy_k(const unsigned char *x, unsigned char *g, long long bytes) {
    unsigned r[ITEMS][4];
    long long base = (long long)blockIdx.x * 256 * ITEMS * 16 + threadIdx.x * 16;
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
        long long o = base + i * 256 * 16;
        if (o < bytes)
            asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[i][0]), "=r"(r[i][1]), "=r"(r[i][2]), "=r"(r[i][3]) : "l"(x + o));
    }
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
        long long o = base + i * 256 * 16;
        if (o < bytes)
            asm volatile(ST ".v4.u32 [%0], {%1,%2,%3,%4};"
                         :: "l"(g + o), "r"(r[i][0]), "r"(r[i][1]), "r"(r[i][2]), "r"(r[i][3]) : "memory");
    }
}
'''


def timeit(fn, reps=20, rounds=5):
    fn()
    cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(rounds):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) * 1000 / reps)
    return float(np.median(times))


def main():
    shapes = sys.argv[1:] or ["32768x4096", "32768x4096:bf16", "16384x50257", "8192x128256:bf16"]
    for shape in shapes:
        dims, _, dt = shape.partition(":")
        n, c = map(int, dims.split("x"))
        nbytes = n * c * (2 if dt else 4)
        src, dst = cp.empty(nbytes, dtype=cp.uint8), cp.empty(nbytes, dtype=cp.uint8)
        src[:] = 1
        stream = cp.cuda.get_current_stream().ptr
        dma = timeit(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, stream))
        print("%s (%d bytes): device copy %.1f us" % (shape, nbytes, dma))
        for items in (4, 8):
            for st in ("st.global", "st.global.cs"):
                k = cp.RawKernel(SRC, "copy_k", options=("-DITEMS=%d" % items, '-DST="%s"' % st))
                grid = (nbytes + 256 * items * 16 - 1) // (256 * items * 16)
                us = timeit(lambda: k((grid,), (256,), (src, dst, np.int64(nbytes))))
                if not bool((dst == 1).all()):
                    raise SystemExit("copy kernel ITEMS=%d %s copied wrong bytes" % (items, st))
                print("  SM copy, %d loads a thread, %-12s %8.1f us  %.3fx the device copy" % (items, st, us, us / dma))
        del src, dst
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
