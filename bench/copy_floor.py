#!/usr/bin/env python3
"""copy_floor.py — how close a kernel on the SMs can come to the training floor, a device copy.

    python3 bench/copy_floor.py [NxC[:bf16] ...]   (default: the four training shapes)

The fused forward+backward reads the logits and writes a gradient of the same size; its floor in
bench/ab/log.md is a device-to-device cudaMemcpyAsync. This times that copy beside the
plainest copy kernels on the SMs: one-shot blocks of 256 threads, each thread ITEMS (4, 8 or 16)
independent 16-byte loads (LD: ld.global.cs, or ld.global.nc with the L2's 256-byte prefetch),
then ITEMS stores (st.global or st.global.cs); and copies by the SMs' bulk-copy unit (TMA:
cp.async.bulk through shared memory, a few chunks a block in flight, the layouts of BULK). Back
to back, median of 5 rounds of 20 calls, µs a call and the ratio to the device copy. Every copy
is checked byte for byte against random source bytes.

First it asks whether the device copy runs on the SMs at all: a kernel that keeps every SM full
(as many blocks as are resident, each spinning for SPIN_MS) is launched on one stream and the
copy on another; a copy that needs the SMs waits for the spin to end, one done by the copy engines
does not. It prints both times. Needs CuPy.
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
            asm volatile(LD ".v4.u32 {%0,%1,%2,%3}, [%4];"
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

// The bulk-copy unit (TMA) instead of the threads' registers: each block's first thread moves
// CH-byte chunks global -> shared -> global, STAGES chunks a block in flight. A load completes
// on its stage's mbarrier; a stage is loaded again once the store of its chunk has read it
// (cp.async.bulk.wait_group.read), so that loads and stores overlap across stages.
#ifndef CH
#define CH 16384
#define STAGES 4
#endif
__device__ __forceinline__ void bulk_load(unsigned dst, const unsigned char *src, unsigned sz, unsigned bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(sz) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(sz), "r"(bar) : "memory");
}
__device__ __forceinline__ unsigned chunk_bytes(long long k, long long bytes) {
    return (unsigned)min((long long)CH, bytes - k * CH); /* the last chunk may be short */
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred p;\n\tWAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t@!p bra WAIT;\n\t}"
                 :: "r"(bar), "r"(parity) : "memory");
}
extern "C" __global__ void __launch_bounds__(32) bulk_k(const unsigned char *x, unsigned char *g, long long bytes) {
    extern __shared__ __align__(128) unsigned char buf[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    if (threadIdx.x != 0) return;
    const unsigned sbuf = (unsigned)__cvta_generic_to_shared(buf), sbar = (unsigned)__cvta_generic_to_shared(bars);
    const long long chunks = (bytes + CH - 1) / CH, step = gridDim.x;
    for (int s = 0; s < STAGES; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sbar + 8 * s));
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
    for (int s = 0; s < STAGES; s++) {
        long long k = blockIdx.x + s * step;
        if (k < chunks) bulk_load(sbuf + s * CH, x + k * CH, chunk_bytes(k, bytes), sbar + 8 * s);
    }
    int j = 0;
    for (long long k = blockIdx.x; k < chunks; k += step, j++) {
        const int s = j % STAGES;
        bar_wait(sbar + 8 * s, (j / STAGES) & 1);
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n\tcp.async.bulk.commit_group;"
                     :: "l"(g + k * CH), "r"(sbuf + s * CH), "r"(chunk_bytes(k, bytes)) : "memory");
        if (j == 0) continue;
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); /* the previous chunk's store has read it */
        const long long kn = k + (STAGES - 1) * step; /* that stage's next chunk */
        const int sp = (j - 1) % STAGES;
        if (kn < chunks) bulk_load(sbuf + sp * CH, x + kn * CH, chunk_bytes(kn, bytes), sbar + 8 * sp);
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// every SM full for ns nanoseconds of the global timer
extern "C" __global__ void __launch_bounds__(1024) spin_k(long long ns, int *done) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < (unsigned long long)ns);
    if (threadIdx.x == 0) atomicAdd(done, 1);
}
'''

SPIN_MS = 20.0
# the bulk copies timed: (bytes a chunk, chunks a block in flight, blocks an SM)
BULK = [(16384, 4, 3), (32768, 3, 2), (8192, 8, 3), (16384, 2, 6), (32768, 6, 1)]


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


def probe_engine(nbytes):
    """(spin ms, copy ms) with every SM held by spin_k on another stream, both from one start."""
    src, dst = cp.empty(nbytes, dtype=cp.uint8), cp.empty(nbytes, dtype=cp.uint8)
    spin = cp.RawKernel(SRC, "spin_k", options=("-DITEMS=4", '-DST="st.global"', '-DLD="ld.global.cs"'))
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    per_sm = dev.attributes["MaxThreadsPerMultiProcessor"] // 1024
    done = cp.zeros(1, dtype=cp.int32)
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    start, spin_end, copy_end = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
    start.record(a)
    b.wait_event(start)
    with a:
        spin((sms * per_sm,), (1024,), (np.int64(SPIN_MS * 1e6), done))
    spin_end.record(a)
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, b.ptr)
    copy_end.record(b)
    spin_end.synchronize()
    copy_end.synchronize()
    if int(done[0]) != sms * per_sm:
        raise SystemExit("spin kernel: %d of %d blocks ran" % (int(done[0]), sms * per_sm))
    return cp.cuda.get_elapsed_time(start, spin_end), cp.cuda.get_elapsed_time(start, copy_end)


def main():
    shapes = sys.argv[1:] or ["32768x4096", "32768x4096:bf16", "16384x50257", "8192x128256:bf16"]
    spin_ms, copy_ms = probe_engine(1 << 28)
    print("device copy of 256 MB with every SM held for %.0f ms: the spin ended at %.2f ms, the copy at %.2f ms"
          " (%s)" % (SPIN_MS, spin_ms, copy_ms, "the copy engines" if copy_ms < spin_ms / 2 else "the copy waited for the SMs"))
    for shape in shapes:
        dims, _, dt = shape.partition(":")
        n, c = map(int, dims.split("x"))
        nbytes = n * c * (2 if dt else 4)
        src, dst = cp.empty(nbytes, dtype=cp.uint8), cp.empty(nbytes, dtype=cp.uint8)
        src[:] = cp.random.randint(0, 256, nbytes, dtype=cp.uint8)  # a misplaced chunk shows
        stream = cp.cuda.get_current_stream().ptr
        dma = timeit(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, stream))
        print("%s (%d bytes): device copy %.1f us" % (shape, nbytes, dma))
        for ld in ("ld.global.cs", "ld.global.nc.L2::256B"):
            for items in (4, 8, 16):
                for st in ("st.global", "st.global.cs"):
                    k = cp.RawKernel(SRC, "copy_k", options=("-DITEMS=%d" % items, '-DST="%s"' % st, '-DLD="%s"' % ld))
                    grid = (nbytes + 256 * items * 16 - 1) // (256 * items * 16)
                    dst[:] = 0
                    us = timeit(lambda: k((grid,), (256,), (src, dst, np.int64(nbytes))))
                    if not bool((dst == src).all()):
                        raise SystemExit("copy kernel %s ITEMS=%d %s copied wrong bytes" % (ld, items, st))
                    print("  SM copy, %-21s x%-2d %-12s %8.1f us  %.3fx the device copy" % (ld, items, st, us, us / dma))
        for ch, stages, per_sm in BULK:
            k = cp.RawKernel(SRC, "bulk_k", options=("-DITEMS=4", '-DST="st.global"', '-DLD="ld.global.cs"',
                                                     "-DCH=%d" % ch, "-DSTAGES=%d" % stages))
            k.max_dynamic_shared_size_bytes = ch * stages
            grid = cp.cuda.Device().attributes["MultiProcessorCount"] * per_sm
            dst[:] = 0
            us = timeit(lambda: k((grid,), (32,), (src, dst, np.int64(nbytes)), shared_mem=ch * stages))
            if not bool((dst == src).all()):
                raise SystemExit("bulk copy CH=%d STAGES=%d copied wrong bytes" % (ch, stages))
            print("  bulk copy (TMA), %2d KB x %d stages, %d blocks an SM %8.1f us  %.3fx the device copy"
                  % (ch // 1024, stages, per_sm, us, us / dma))
        del src, dst
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
