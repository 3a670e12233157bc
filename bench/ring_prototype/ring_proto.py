#!/usr/bin/env python3
import os
import sys

import cupy as cp
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))  # bench/ring_prototype
SRC = open(os.path.join(HERE, "ring.cu")).read()


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


def occupancy(k, block, smem):
    try:
        return cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, block, smem)
    except Exception as ex:  # noqa
        print("  (occupancy API: %s)" % ex)
        return max(1, (227 * 1024) // (smem + 1024))


def run(dt, n, c, variants):
    esize = 4 if dt == "fp32" else 2
    tdt = torch.float32 if dt == "fp32" else torch.bfloat16
    x = (torch.randn(n, c, device="cuda") * 3).to(tdt)
    t = torch.randint(0, c, (n,), device="cuda")
    g = torch.empty_like(x)
    loss = torch.empty(n, device="cuda")
    cx = cp.from_dlpack(x.view(torch.uint8) if esize == 2 else x)
    cg = cp.from_dlpack(g.view(torch.uint8) if esize == 2 else g)
    nbytes = n * c * esize
    src = cp.empty(nbytes, dtype=cp.uint8)
    dst = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.get_current_stream().ptr
    dma = timeit(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, stream))
    print("%dx%d %s: device copy %.1f us" % (n, c, dt, dma), flush=True)
    ref_lse = torch.logsumexp(x.double(), 1)
    ref_loss = ref_lse - x.double().gather(1, t[:, None])[:, 0]
    ref_g = (torch.softmax(x.double(), 1) - torch.nn.functional.one_hot(t, c).double()) / n
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for v in variants:
        d = dict(v)
        kname = d.pop("K", "ring")
        opts = ["-DESIZE=%d" % esize, "-DC=%d" % c, "-std=c++17"] + ["-D%s=%s" % kv for kv in d.items()]
        try:
            k = cp.RawKernel(SRC, kname, options=tuple(opts), backend="nvrtc")
            block = d["BLOCK"]
            smem = (block // d["TPR"]) * d["STAGES"] * c * esize
            k.max_dynamic_shared_size_bytes = smem
            occ = occupancy(k, block, smem)
            for mult in sorted({occ, max(1, occ - 1)}):
                grid = sms * mult
                fn = lambda: k((grid,), (block,), (cx, np.uint64(t.data_ptr()), cg, np.uint64(loss.data_ptr()), np.int64(n), np.float32(1.0 / n)),
                               shared_mem=smem)
                g.fill_(float("nan"))
                loss.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                if d.get("COMPUTE", 1) == 0:
                    el = eg = float((g.view(torch.uint8) != x.view(torch.uint8)).sum().item())
                else:
                  el = (loss.double() - ref_loss).abs().max().item()
                  eg = (g.double() - ref_g).abs().max().item() * n
                us = timeit(fn)
                print("  %-8s %-60s regs %3d occ %d grid %5d  %7.1f us  %.3fx copy  loss err %.2e grad err*n %.2e"
                      % (kname, " ".join("%s=%s" % kv for kv in d.items()), k.num_regs, mult, grid, us, us / dma, el, eg),
                      flush=True)
        except Exception as ex:
            print("  %s: FAILED %s" % (d, str(ex)[:300]), flush=True)
    del x, g, src, dst


def V(**kw):
    return list(kw.items())


def main():
    bf = [
        V(HOLD=0, TPR=32, BLOCK=128, STAGES=2, UNR=4),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=32, STAGES=4),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=64, STAGES=3),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=128, STAGES=3),
        V(K="ring_st", TPR=32, BLOCK=32, STAGES=3, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=32, STAGES=4, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=64, STAGES=3, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=64, STAGES=4, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=128, STAGES=3, UNR=4),
        V(K="ring_st", TPR=64, BLOCK=64, STAGES=3, UNR=4),
    ]
    fp = [
        V(HOLD=0, TPR=32, BLOCK=64, STAGES=2, UNR=4),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=32, STAGES=3),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=32, STAGES=4),
        V(K="ring_st", COMPUTE=0, TPR=32, BLOCK=64, STAGES=3),
        V(K="ring_st", TPR=32, BLOCK=32, STAGES=3, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=32, STAGES=4, UNR=4),
        V(K="ring_st", TPR=32, BLOCK=64, STAGES=3, UNR=4),
        V(K="ring_st", TPR=64, BLOCK=64, STAGES=3, UNR=4),
        V(K="ring_st", TPR=128, BLOCK=128, STAGES=3, UNR=4),
    ]
    which = sys.argv[1:] or ["bf16", "fp32"]
    if "bf16" in which:
        run("bf16", 32768, 4096, bf)
    if "fp32" in which:
        run("fp32", 32768, 4096, fp)


if __name__ == "__main__":
    main()
