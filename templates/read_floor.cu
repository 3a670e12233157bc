/*
 * read_floor.cu — the floor as this card reaches it: read every byte of the
 * problem's inputs once with 16-byte streaming loads, the way the loss kernel
 * must, and nothing else. The tuner times it beside the candidates.
 * Knobs: XENT_UNROLL independent 16-byte loads in flight per thread.
 */
#ifndef XENT_UNROLL
#define XENT_UNROLL 4
#endif

struct u32x4 { unsigned x, y, z, w; };

__device__ __forceinline__ unsigned load_xor(const u32x4 *p) {
    unsigned a, b, c, d;
    asm("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
    return a ^ b ^ c ^ d;
}

/* XOR of every word, stored only if it equals a value no input gives in
 * practice: the loads cannot be dropped, and nearly nothing is written. */
__device__ unsigned read_range(const u32x4 *p, long long n) {
    unsigned acc = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (XENT_UNROLL - 1) * stride < n; i += XENT_UNROLL * stride) {
        unsigned v[XENT_UNROLL];
#pragma unroll
        for (int k = 0; k < XENT_UNROLL; k++) v[k] = load_xor(p + i + k * stride);
#pragma unroll
        for (int k = 0; k < XENT_UNROLL; k++) acc ^= v[k];
    }
    for (; i < n; i += stride) acc ^= load_xor(p + i);
    return acc;
}

extern "C" __global__ void xent_read_floor(const u32x4 *a, long long na, const u32x4 *b,
                                           long long nb, unsigned *sink) {
    unsigned acc = read_range(a, na) ^ read_range(b, nb);
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
