/* xent_grad, part 2: a slice's running sums, rebased and merged across the
 * team and the cluster (distributed shared memory). */

/* A slice's running sums: max, sum of exp(y - m), and for smoothing the sum
 * of w (y - m) and of w. */
struct acc {
    float m, s;
#if XENT_SMOOTHING || XENT_SHARD
    float sy, sw;
#endif
};

__device__ __forceinline__ void acc_init(acc &a) {
    a.m = neg_inf();
    a.s = 0.0f;
#if XENT_SMOOTHING || XENT_SHARD
    a.sy = 0.0f;
    a.sw = 0.0f;
#endif
}

/* Rebase a to the max M: the terms of an empty slice stay 0, not NaN. */
__device__ __forceinline__ void acc_rebase(acc &a, float M) {
    float k = a.m == neg_inf() ? 0.0f : exp_shifted(a.m, safe_max(M));
    a.s *= k;
#if XENT_SMOOTHING || XENT_SHARD
    if (a.sw != 0.0f) a.sy += a.sw * (a.m - M);
#endif
    a.m = M;
}

__device__ __forceinline__ void acc_merge(acc &a, acc b) {
    float M = fmaxf(a.m, b.m);
    acc_rebase(a, M);
    acc_rebase(b, M);
    a.s += b.s;
#if XENT_SMOOTHING || XENT_SHARD
    a.sy += b.sy;
    a.sw += b.sw;
#endif
}

__device__ __forceinline__ acc acc_shfl(const acc &a, int o) {
    acc b;
    b.m = __shfl_xor_sync(FULL_MASK, a.m, o);
    b.s = __shfl_xor_sync(FULL_MASK, a.s, o);
#if XENT_SMOOTHING || XENT_SHARD
    b.sy = __shfl_xor_sync(FULL_MASK, a.sy, o);
    b.sw = __shfl_xor_sync(FULL_MASK, a.sw, o);
#endif
    return b;
}

#include "shared/team.cuh"

/* The team's merged sums in every lane (a cluster merges them after). */
__device__ __forceinline__ void team_merge(acc &a) {
    __shared__ acc parts[WARPS];
    if (XENT_TPR > 32) __syncthreads(); /* the previous row's readers are done with parts */
    TEAM_REDUCE(a, parts, acc_shfl, acc_merge);
}

#if XENT_SPLIT > 1
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float remote_f(const float *local, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(local), ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}
#define ACC_FLOATS (sizeof(acc) / sizeof(float))
/* Every block of the cluster merges the blocks' partials in rank order, so
 * all hold the same bits. Two buffers: a block may publish row i + 1 while a
 * slower one still reads row i, never row i + 2 (the barrier between). */
__device__ __forceinline__ void cluster_merge(acc &a, int parity) {
    __shared__ float pub[2][ACC_FLOATS];
    __shared__ acc res;
    if (threadIdx.x == 0) {
        const float *f = (const float *)&a;
        for (int i = 0; i < (int)ACC_FLOATS; i++) pub[parity][i] = f[i];
    }
    cluster_sync();
    if (threadIdx.x == 0) {
        float v[XENT_SPLIT][ACC_FLOATS];
#pragma unroll
        for (int r = 0; r < XENT_SPLIT; r++)
#pragma unroll
            for (int i = 0; i < (int)ACC_FLOATS; i++) v[r][i] = remote_f(&pub[parity][i], r);
        acc m;
        acc_init(m);
#pragma unroll
        for (int r = 0; r < XENT_SPLIT; r++) {
            acc b;
            float *f = (float *)&b;
#pragma unroll
            for (int i = 0; i < (int)ACC_FLOATS; i++) f[i] = v[r][i];
            acc_merge(m, b);
        }
        res = m;
    }
    __syncthreads();
    a = res;
}
#else
__device__ __forceinline__ unsigned cluster_rank() { return 0; }
#endif
