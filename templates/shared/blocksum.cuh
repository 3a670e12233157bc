/* shared/blocksum.cuh — a block's sum of pairs of doubles, for the last
 * block's reductions of both families. Inlined where a template says
 * #include "shared/blocksum.cuh" (tools/embed.sh), after published.cuh. */

/* Fixed-shape sum of pairs over a block of nthreads: same inputs, same
 * order, same bits. The first warp ends with the totals; the closing barrier
 * frees sx and sy for the next sum. */
__device__ __forceinline__ void block_sum2(double &x, double &y, int nthreads) {
    __shared__ double sx[32], sy[32];
    x = warp_sum_d(x);
    y = warp_sum_d(y);
    if (nthreads <= 32) return;
    if (threadIdx.x % 32 == 0) {
        sx[threadIdx.x / 32] = x;
        sy[threadIdx.x / 32] = y;
    }
    __syncthreads();
    x = 0.0;
    y = 0.0;
    if (threadIdx.x < 32) {
        x = threadIdx.x < nthreads / 32 ? sx[threadIdx.x] : 0.0;
        y = threadIdx.x < nthreads / 32 ? sy[threadIdx.x] : 0.0;
        x = warp_sum_d(x);
        y = warp_sum_d(y);
    }
    __syncthreads();
}
