/* xent_fwd, part 4: the finish. Split rows' partials combined by their last team, and
 * the reduction's partials summed by the grid's last block, in a fixed order. */

/* Reads of what other blocks published, from L2. CUDA's __ldcg is volatile
 * asm without a memory clobber; the clobber also keeps these after every
 * plain load and store before them, not only after the fence. */
__device__ __forceinline__ float published_f(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
#include "shared/published.cuh"

/* Lane 0's flag v in every lane of the team, through the caller's shared
 * slot when the team is a block; the barriers (or the warp's sync) also
 * order the team's reads of what was published after lane 0's acquire, and
 * the second barrier keeps the next item's lane 0 from overwriting the slot
 * before every thread has read it. A macro, so that each caller keeps its
 * own slot where it was in the shared layout. */
#define LANE0_TO_TEAM(v, slot, lane)             \
    do {                                         \
        if (XENT_TPR > 32) {                     \
            if ((lane) == 0) (slot) = (v);       \
            __syncthreads();                     \
            (v) = (slot);                        \
            __syncthreads();                     \
        } else {                                 \
            (v) = __shfl_sync(FULL_MASK, (v), 0); \
            __syncwarp();                        \
        }                                        \
    } while (0)

/* Split rows: this segment's partial, for the team that merges the row. */
__device__ __forceinline__ void store_segment(const acc &a, long long row, int seg, int split, float *parts) {
    float *mine = parts + ((size_t)row * split + seg) * PART_FLOATS;
    mine[0] = a.m;
    mine[1] = a.s;
    mine[2] = a.xt;
#if XENT_SMOOTHING
    mine[3] = a.sx;
#if XENT_WEIGHTS
    mine[4] = a.sw;
#endif
#endif
}

/* Publish this segment's partial and count its arrival; true for the row's
 * last segment, whose team then combines them all. */
__device__ bool publish_segment(const acc &a, long long row, int seg, int split, unsigned *arrivals,
                                float *parts) {
    store_segment(a, row, seg, split, parts);
    return arrive(arrivals + row) == (unsigned)(split - 1);
}

/* Segment s's published partial, read from L2. */
__device__ __forceinline__ acc published_segment(const float *parts, long long row, int s, int split) {
    const float *q = parts + ((size_t)row * split + s) * PART_FLOATS;
    acc b;
    b.m = published_f(q);
    b.s = published_f(q + 1);
    b.xt = published_f(q + 2);
#if XENT_SMOOTHING
    b.sx = published_f(q + 3);
#if XENT_WEIGHTS
    b.sw = published_f(q + 4);
#endif
#endif
    return b;
}

#if XENT_REDUCTION != 0
#include "shared/blocksum.cuh"

/* Sum pairs i = from, from + XENT_BLOCK, ... < count in that order. Four
 * loads are issued before their adds, so the last block's pass over ~500
 * partials waits on two L2 round trips, not five. */
__device__ __forceinline__ void sum_published(const double2 *pairs, long long from, long long count,
                                              double &x, double &y) {
    long long i = from;
    for (; i + 3 * XENT_BLOCK < count; i += 4 * XENT_BLOCK) {
        double2 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = published_d2(pairs + i + u * XENT_BLOCK);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            x += v[u].x;
            y += v[u].y;
        }
    }
    for (; i < count; i += XENT_BLOCK) {
        double2 v = published_d2(pairs + i);
        x += v.x;
        y += v.y;
    }
}

/* The scalar loss from the summed losses and weights. */
__device__ __forceinline__ void write_loss(float *loss, double l, double wsum) {
    /* A zero weight sum makes PyTorch's nll mean 0/0: NaN, whatever the smoothing term. */
    *loss = XENT_REDUCTION != 2 ? (float)l : wsum == 0.0 ? __int_as_float(0x7fc00000) : (float)(l / wsum);
}

#if XENT_SEGMENTED
/* Split rows: the team that finished a row publishes its result; the team
 * of the last row sums all n of them (lane by lane, then the team: a fixed
 * order) and writes the loss. No other block takes part, so the rest leave
 * as soon as their segments are published. Called by every lane of a team
 * that finished a row (TPR >= 32: the whole warp, or the whole block). */
__device__ void finish_rows(const row_result &r, long long row, int lane, float *loss, unsigned char *ws,
                            double *row_results, long long n) {
    __shared__ bool done_team;
    unsigned *rows_done = (unsigned *)(ws + 4);
    bool done = false;
    if (lane == 0) {
        row_results[2 * row] = r.loss;
        row_results[2 * row + 1] = r.weight;
        done = arrive(rows_done) == (unsigned)(n - 1);
    }
    if (XENT_TPR > 32) {
        if (lane == 0) done_team = done;
        __syncthreads(); /* also orders the team's reads after lane 0's acquire */
        done = done_team;
    } else {
        done = __shfl_sync(FULL_MASK, done, 0);
        __syncwarp(); /* orders the team's reads after lane 0's acquire */
    }
    if (!done) return;
    double l = 0.0, wsum = 0.0;
    for (long long i = lane; i < n; i += XENT_TPR) {
        const double2 v = published_d2((const double2 *)row_results + i);
        l += v.x;
        wsum += v.y;
    }
    block_sum2(l, wsum, XENT_TPR);
    if (lane == 0) {
        write_loss(loss, l, wsum);
        *rows_done = 0u;
    }
}

/* A sum or mean of few split rows in one level: rows of G = min(split, 32)
 * lanes a row, each lane merging split / G segments, then its group by a
 * butterfly; TPR / G rows a round. Both take split a power of two, as the
 * SPLIT knob's values are: another count would leave segments unmerged. At
 * most this many rounds: a second round (an L2 round trip of the last team)
 * cost more than the second level's arrival it saves (7x1000003 at 64
 * segments of 128 threads, 2 rounds: 12.97 -> 13.38 us). */
#define ONE_LEVEL_ROUNDS 1
__device__ __forceinline__ int row_lanes(int split) { return split < 32 ? split : 32; }
__device__ __forceinline__ bool one_level(long long n, int split) {
    return n <= (long long)ONE_LEVEL_ROUNDS * (XENT_TPR / row_lanes(split));
}

/* Every segment arrives on one counter (the rows-finished count, unused
 * then); the team of the last merges all rows (lanes, then butterflies, then
 * rounds and the team's sum: a fixed order) and writes the loss. The other
 * teams leave once their segment is published. Called by every lane of a
 * team (TPR >= 32: the whole warp, or the whole block). */
__device__ void finish_all(const acc &a, long long row, int seg, bool active, int lane, float *parts, long long n,
                           int split, const target_t *targets, long long ignore_index, int c, float smoothing,
                           const float *__restrict__ w, int *err, float *lse_out, float *loss, unsigned char *ws) {
    __shared__ bool last_team;
    unsigned *all_done = (unsigned *)(ws + 4);
    bool last = false;
    if (lane == 0 && active) {
        store_segment(a, row, seg, split, parts);
        last = arrive(all_done) == (unsigned)(n * split - 1);
    }
    LANE0_TO_TEAM(last, last_team, lane);
    if (!last) return;
    const int g_lanes = row_lanes(split), per = split / g_lanes, g = lane % g_lanes;
    double l = 0.0, wsum = 0.0;
    for (long long r0 = 0; r0 < n; r0 += XENT_TPR / g_lanes) {
        const long long r = r0 + lane / g_lanes;
        const bool has = r < n; /* the same in a group: its butterfly stays within it */
        const long long t = has && g == 0 ? (long long)load_target(targets, r) : ignore_index;
        acc b;
        acc_init(b);
        for (int q = 0; q < per && has; q++) acc_merge(b, published_segment(parts, r, g * per + q, split));
        for (int o = g_lanes / 2; o > 0; o >>= 1) acc_merge(b, acc_shfl_xor(b, o));
        if (has && g == 0) {
            const row_result rr = finish_row(b, t, ignore_index, c, smoothing, w, err, lse_out, r);
            l += rr.loss;
            wsum += rr.weight;
        }
    }
    block_sum2(l, wsum, XENT_TPR);
    if (lane == 0) {
        write_loss(loss, l, wsum);
        *all_done = 0u;
    }
}
#endif

/* A block that is one team (TPR == BLOCK) has its sums in thread 0 alone, whose lane
 * emits the rows: the block's sum of them adds zeros to thread 0's, so it is skipped, with
 * its two barriers, which held a one-row block's slot without a load in flight. */
#define SUMS_IN_THREAD0 (XENT_TPR == XENT_BLOCK && !XENT_TILE)
__device__ __forceinline__ void block_sums(double &loss_acc, double &weight_acc) {
#if !SUMS_IN_THREAD0
    block_sum2(loss_acc, weight_acc, XENT_BLOCK);
#else
    (void)loss_acc;
    (void)weight_acc;
#endif
}

/* A block's sums into the loss. The grid's only block writes it
 * (XENT_ONE_BLOCK). Under XENT_FINISH_APART each block stores its partial
 * at ws + 16 and leaves, and xent_fwd_finish, launched after the grid, sums
 * them in a fixed order: the kernel then holds no last block's pass over the
 * partials, whose code took 16 to 20 registers a thread more than the rows
 * (72 against 56 at 32768x1000 bf16: seven 128-thread blocks an SM instead
 * of nine), and a block's slot takes the next block at once. Otherwise the
 * last block to arrive sums them, without a second launch. */
__device__ void finish_reduction(double loss_acc, double weight_acc, float *loss, unsigned char *ws) {
#if XENT_ONE_BLOCK
    /* The grid's only block: its sums are the loss, written without publishing
     * them, counting an arrival and reading them back (two L2 round trips).
     * The same bits: the last block's pass over one partial adds zeros to it. */
    block_sums(loss_acc, weight_acc);
    if (threadIdx.x == 0) write_loss(loss, loss_acc, weight_acc);
    (void)ws;
#elif XENT_FINISH_APART
    block_sums(loss_acc, weight_acc);
    if (threadIdx.x == 0) ((double2 *)(ws + 16))[blockIdx.x] = make_double2(loss_acc, weight_acc);
    (void)loss;
#else
    __shared__ bool last;
    unsigned *ticket = (unsigned *)ws;
    double2 *parts = (double2 *)(ws + 16);
    block_sums(loss_acc, weight_acc);
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_double2(loss_acc, weight_acc);
        last = arrive(ticket) == gridDim.x - 1; /* releases the partial, acquires the rest */
    }
    /* orders the other threads' reads after thread 0's acquire */
    __syncthreads();
    if (!last) return;
    double l = 0.0, wsum = 0.0;
    sum_published(parts, threadIdx.x, gridDim.x, l, wsum);
    block_sum2(l, wsum, XENT_BLOCK);
    if (threadIdx.x == 0) {
        write_loss(loss, l, wsum);
        *ticket = 0u;
    }
#endif
}
#endif

