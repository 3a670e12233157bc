/* xent_grad, part 5: the grid's sums (the last block's fixed-order pass) and
 * a row's loss, lse or shard statistics from its merged sums. */

#include "shared/published.cuh"

#include "shared/blocksum.cuh"

/* Pairs summed over the grid: each block publishes its sums (x, y), and the
 * last block to arrive adds them in block order (bitwise reproducible for a
 * given grid) into tot, its thread 0's the totals. Returns whether this
 * block is that last one. */
__device__ bool grid_sum2(double x, double y, double2 &tot, unsigned *ticket, double2 *parts, int nthreads) {
    __shared__ bool last;
    block_sum2(x, y, nthreads);
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_double2(x, y);
        last = arrive(ticket) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return false;
    x = 0.0;
    y = 0.0;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += nthreads) {
        double2 v = published_d2(parts + i);
        x += v.x;
        y += v.y;
    }
    block_sum2(x, y, nthreads);
    tot = make_double2(x, y);
    return true;
}

/* The loss from the blocks' partials; for a mean, over the weight sum (0/0 =
 * NaN as PyTorch). */
__device__ void finish(double l, double w, float *loss, unsigned *ticket, double2 *parts, int nthreads) {
    double2 t;
    if (!grid_sum2(l, w, t, ticket, parts, nthreads)) return;
    if (threadIdx.x == 0) {
        *loss = XENT_REDUCTION == 1 ? (float)t.x : t.y == 0.0 ? qnan() : (float)(t.x / t.y);
        *ticket = 0u;
    }
}

__device__ __forceinline__ bool target_bad(long long t, const gargs &k) {
    return t != k.ignore_index && (t < 0 || t >= k.vocab);
}

#if ROW_PASS
/* The row's loss from its merged sums (non-shard), or NaN / 0. */
__device__ __forceinline__ float row_loss(const acc &a, long long t, float yt, const gargs &k, float lse) {
    if (t == k.ignore_index) return 0.0f;
    if (target_bad(t, k)) return qnan();
    float ls = lse - safe_max(a.m); /* log of the shifted sum */
    float wt = class_weight(k.weights, t);
    float loss = (1.0f - k.smoothing) * wt * (ls - (yt - a.m));
#if XENT_SMOOTHING
    loss += k.smoothing / (float)k.vocab * (a.sw * ls - a.sy);
#endif
#if XENT_ZLOSS
    loss += k.z_loss * lse * lse;
#endif
    return loss;
}
#endif

/* Orders a team's gradient stores before the target's rewrite. */
__device__ __forceinline__ void team_barrier() {
#if XENT_TPR > 32
    __syncthreads();
#else
    __syncwarp();
#endif
}

/* A row's loss, lse or shard statistics from its merged sums, written by
 * the team's first lane; returns the row's (loss, weight) for a reduction. */
#if ROW_PASS
__device__ __forceinline__ double2 row_out(const gargs &k, long long row, long long t, bool bad, float yt,
                                           const acc &a, float lse, bool write) {
    double2 out = make_double2(0.0, 0.0);
    if (!write) return out;
#if XENT_SHARD
    float lin = 0.0f;
    if (t != k.ignore_index && !bad) {
        lin = (1.0f - k.smoothing) * yt;
        if (k.smoothing > 0.0f) lin += k.smoothing / (float)k.vocab * (a.sy + a.sw * a.m);
    }
    k.stats[row] = lse;
    k.stats[k.n + row] = lin;
#else
    float loss = row_loss(a, t, yt, k, lse);
    if (bad) atomicOr(k.err, 1);
#if XENT_LSE
    k.lse[row] = lse;
#endif
#if XENT_REDUCTION == 0
    k.loss[row] = loss;
#else
    float w = (t == k.ignore_index || bad) ? 0.0f : class_weight(k.weights, t);
    out = make_double2((double)loss, (double)w);
#endif
#endif
    return out;
}
#endif
