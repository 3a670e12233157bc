/* shared/published.cuh — what the last block of a grid reads of what the
 * others published, how a block counts its arrival, and a warp's sum of the
 * doubles it adds. Inlined where a template says
 * #include "shared/published.cuh" (tools/embed.sh). */

/* A pair of doubles another block stored, read from L2 (.cg): the clobber
 * keeps the read after every plain load and store before it. */
__device__ __forceinline__ double2 published_d2(const double2 *p) {
    double2 v;
    asm volatile("ld.global.cg.v2.f64 {%0,%1}, [%2];" : "=d"(v.x), "=d"(v.y) : "l"(p) : "memory");
    return v;
}

/* Counts an arrival: releases what this thread stored before it and, for the
 * last to arrive, acquires what the others did (one gpu-scope atomic instead
 * of two sequentially consistent fences around a relaxed one). */
__device__ __forceinline__ unsigned arrive(unsigned *counter) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
    return old;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
