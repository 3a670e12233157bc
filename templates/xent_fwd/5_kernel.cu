/* xent_fwd, part 5: the kernel. Its arguments, the row loops of both paths, the
 * registers it asks for, and the entry point. */

/* The launch's arguments, as one value the row loops share. */
struct kargs {
    const unsigned char *logits;
    const target_t *targets;
    const float *weights;
    float *loss, *lse;
    unsigned char *ws;
    int *err;
    long long n, stride, ignore_index;
    int c, split;
    float smoothing;
};

/* A finished row goes to the output (none) or into this thread's sums. */
__device__ __forceinline__ void emit_row(const kargs &k, long long row, const row_result &r,
                                         double &loss_acc, double &weight_acc) {
#if XENT_REDUCTION == 0
    k.loss[row] = r.loss;
    (void)loss_acc;
    (void)weight_acc;
#else
    (void)k;
    (void)row;
    loss_acc += r.loss;
    weight_acc += r.weight;
#endif
}

__device__ __forceinline__ size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }
__device__ __forceinline__ unsigned *split_arrivals(const kargs &k) {
    return (unsigned *)(k.ws + 16 + 16 * (size_t)gridDim.x);
}
__device__ __forceinline__ float *split_parts(const kargs &k) {
    return (float *)((unsigned char *)split_arrivals(k) + align16((size_t)k.n * 4));
}
__device__ __forceinline__ double *split_results(const kargs &k) {
    return (double *)((unsigned char *)split_parts(k) + align16((size_t)k.n * k.split * PART_FLOATS * 4));
}

#if XENT_TILE
/* Bytes of a warp's region: 32 rows plus room for the span's misalignment,
 * rounded so every region starts 16-byte aligned (as xent_config_smem). */
__device__ __forceinline__ size_t tile_region(long long stride) {
    return align16((size_t)(32 * stride + XENT_VEC) * ESIZE);
}

/* Warp w of block b takes groups of 32 rows g = b * WARPS + w, then
 * g + grid * WARPS, ...: warps never wait for each other, and the loop is
 * uniform within a warp, so __syncwarp suffices. No thread returns early:
 * finish_reduction needs the whole block. */
__device__ __forceinline__ void tile_rows(const kargs &k, double &loss_acc, double &weight_acc) {
    extern __shared__ __align__(16) unsigned char tiles[];
    const int lane = threadIdx.x % 32;
    unsigned char *region = tiles + (threadIdx.x / 32) * tile_region(k.stride);
    const long long groups = (k.n + 31) / 32;
    for (long long g = (long long)blockIdx.x * WARPS + threadIdx.x / 32; g < groups;
         g += (long long)gridDim.x * WARPS) {
        const long long r0 = g * 32;
        const int rows = (int)min(32LL, k.n - r0);
        const long long row = r0 + lane;
        /* before the staging, so its latency hides behind it */
        const long long t = lane < rows ? (long long)load_target(k.targets, row) : k.ignore_index;
        __syncwarp(); /* every lane has read the previous group */
        const int mis = stage_warp(region, k.logits, r0, rows, k.c, k.stride, lane);
        __syncwarp();
        if (lane >= rows) continue;
        const int t_in = (t >= 0 && t < k.c) ? (int)t : -1;
        acc a = tile_row((const tile_t *)region + mis + lane * k.stride, k.c, t_in, k.weights);
        row_result r = finish_row(a, t, k.ignore_index, k.c, k.smoothing, k.weights, k.err, k.lse, row);
        emit_row(k, row, r, loss_acc, weight_acc);
    }
    __syncwarp(); /* lanes past the last row rejoin before finish_reduction's barriers */
}
#else
#if XENT_SEGMENTED
/* A split row's segment, its total in every lane of the team: lane 0
 * publishes it. The team of the row's last segment then reads the partials
 * a lane each (one L2 round trip, where a lane reading them one after
 * another took one a segment), merges them in a fixed order (lane by lane,
 * then the team's tree) and finishes the row; the other teams are done.
 * Teams are a warp or a whole block (SPLIT > 1 takes TPR >= 32), so which
 * teams go on is uniform in every warp and, for block teams, in the block. */
__device__ __forceinline__ void split_item(const kargs &k, const acc &a, long long row, int seg, long long t,
                                           bool active, int lane, double &loss_acc, double &weight_acc) {
    __shared__ bool last_team;
    unsigned *arrivals = split_arrivals(k);
    float *parts = split_parts(k);
#if XENT_REDUCTION != 0
    if (one_level(k.n, k.split)) { /* uniform: the launch's n and split */
        finish_all(a, row, seg, active, lane, parts, k.n, k.split, k.targets, k.ignore_index, k.c, k.smoothing,
                   k.weights, k.err, k.lse, k.loss, k.ws);
        return;
    }
#endif
    bool last = lane == 0 && active && publish_segment(a, row, seg, k.split, arrivals, parts);
    LANE0_TO_TEAM(last, last_team, lane);
    if (!last) return;
    acc b;
    acc_init(b);
    for (int s = lane; s < k.split; s += XENT_TPR) acc_merge(b, published_segment(parts, row, s, k.split));
    team_merge(b);
    row_result r = {0.0f, 0.0f};
    if (lane == 0) {
        arrivals[row] = 0; /* leave the workspace zeroed for the next launch */
        r = finish_row(b, t, k.ignore_index, k.c, k.smoothing, k.weights, k.err, k.lse, row);
    }
#if XENT_REDUCTION != 0
    finish_rows(r, row, lane, k.loss, k.ws, split_results(k), k.n); /* r of lane 0 */
    (void)loss_acc;
    (void)weight_acc;
#else
    if (lane == 0) emit_row(k, row, r, loss_acc, weight_acc);
#endif
}
#endif

/* One work item for this team: a row, or one segment of it (split > 1). */
__device__ __forceinline__ void team_item(const kargs &k, long long w, bool active, int lane, bool one_chunk,
                                          double &loss_acc, double &weight_acc) {
    /* whole rows skip the 64-bit division, the segment bounds and the combine */
    const bool whole = !XENT_SEGMENTED;
    long long row = active ? w : 0;
    int seg = 0;
    if (active && !whole) {
        row = w / k.split;
        seg = (int)(w - row * k.split);
    }
    const long long t = active ? (long long)load_target(k.targets, row) : k.ignore_index;
    const int t_in = (t >= 0 && t < k.c) ? (int)t : -1;
    row_layout l = layout(k.logits, row, k.stride, k.c);
    int v0 = 0, v1 = active ? l.nv : 0;
    if (active && !whole) {
        const int per = (l.nv + k.split - 1) / k.split;
        v0 = min(seg * per, l.nv);
        v1 = min(v0 + per, l.nv);
    }

    acc a = segment(l, v0, v1, active && seg == 0, k.c, lane, t_in, k.weights, one_chunk, active && whole);
    team_merge(a);
#if XENT_SEGMENTED
    split_item(k, a, row, seg, t, active, lane, loss_acc, weight_acc);
#else
    if (lane == 0 && active)
        emit_row(k, row, finish_row(a, t, k.ignore_index, k.c, k.smoothing, k.weights, k.err, k.lse, row),
                 loss_acc, weight_acc);
#endif
    /* Lane 0 ran alone above. The next __syncthreads is an .aligned bar.sync,
     * undefined unless the warp's lanes reach it together: without this,
     * whole-block teams with two passes sum split rows wrongly. */
    __syncwarp();
}

/* Whether every segment fits one chunk; uniform for all teams, so 2-pass team
 * reductions stay in step. With XENT_C it is known when compiling. */
__device__ __forceinline__ bool fits_one_chunk(const kargs &k) {
#ifdef XENT_C
    if (NV_MAX <= CHUNK) return true; /* per segment: at most NV_MAX vectors, whatever the split */
#endif
    return ((k.c / XENT_VEC) + k.split - 1) / k.split <= CHUNK;
}

/* Block b takes item groups b, b + grid, ... (a grid of one round, or as many rounds as PERSIST gives). */
__device__ __forceinline__ void team_rows(const kargs &k, double &loss_acc, double &weight_acc) {
    const int team = threadIdx.x / XENT_TPR;
    const int lane = threadIdx.x % XENT_TPR;
    const long long work = k.n * k.split;
    const bool one_chunk = fits_one_chunk(k);
    for (long long base = (long long)blockIdx.x * TEAMS; base < work; base += (long long)gridDim.x * TEAMS) {
        const long long w = base + team;
        team_item(k, w, w < work, lane, one_chunk, loss_acc, weight_acc);
    }
}
#endif

/* Left alone, ptxas' occupancy heuristic squeezed some configs into 32 or 40
 * registers and spilled; asking for one block per SM let others grow to 127
 * where 96 suffice. So ask for the blocks that leave each thread its chunk
 * plus room for addresses and sums (a little more for weighted smoothing,
 * whose class weights are loaded beside the chunk: a bf16 thread-per-row chunk of 64 spilled 12 bytes at 128; with
 * POLY's polynomial as well, an f16 two-pass chunk of 32 words spilled 12
 * bytes at 128, so such kernels take the next step down in blocks). */
/* Rows short enough for a compiled-in class count need fewer registers than
 * the floor, and a lower one fits more warps to keep loads in flight (fp32
 * 1048576x10, TPR=1 VEC=2 ITEMS=8: 48 registers without spills, 40 warps per
 * SM, where the floor of 80 left 24). Their chunk is counted in logits:
 * counting only the items a row fills (ITEMS_LIVE) spilled at c = 100. Not
 * TILE, whose unrolled rows hold up to 32 logits (176 bytes spilled at 48). */
#if defined(XENT_C) && !XENT_SMOOTHING && !XENT_TILE
#define SHORT_ROWS 1
#else
#define SHORT_ROWS 0
#endif
#if XENT_LOGIT == 0 || SHORT_ROWS
#define CHUNK_REGS (XENT_ITEMS * XENT_VEC + 32)
#else
/* 16-bit chunks stay packed through the max (chunk_max): a bf16 chunk of 64
 * logits fit 72 registers without spilling where it took 96 widened. With
 * smoothing too, since exp_sum adds the side sums as it widens each element;
 * 16 registers more for them (at 8 more, weighted two-pass chunks of 64
 * spilled 8 bytes). */
#define CHUNK_REGS (XENT_ITEMS * VWORDS + 40)
#endif
#if SHORT_ROWS
#define REGS_FLOOR 48
#elif XENT_SEGMENTED && XENT_LOGIT == 0
/* Split fp32 rows: a team's segment is one or a few chunks, and every team
 * of a split should be resident at once; at 80 registers a split of 896
 * 128-thread teams left a second, partial round, at 56 none spills and all
 * fit (bench/ab/log.md has the A/B). */
#define REGS_FLOOR 56
#elif XENT_LOGIT == 0
#define REGS_FLOOR 80
#else
#define REGS_FLOOR 72
#endif
#define REGS_CHUNK CHUNK_REGS
/* 16-bit weighted smoothing over a two-pass chunk of 64 logits spilled 16-32
 * bytes at 128 registers (4 blocks of 128 threads): WIDE_WEIGHTED asks for
 * one block fewer there. */
#define WIDE_WEIGHTED (XENT_LOGIT != 0 && XENT_SMOOTHING && XENT_WEIGHTS && XENT_PASSES == 2 && XENT_ITEMS * VWORDS >= 32)
#define REGS_WANTED                                                                                  \
    ((REGS_CHUNK > REGS_FLOOR ? REGS_CHUNK : REGS_FLOOR) + (XENT_LOGIT ? 16 : 32) * XENT_SMOOTHING + 16 * XENT_SMOOTHING * XENT_WEIGHTS + \
     32 * XENT_SMOOTHING * XENT_WEIGHTS * ((XENT_POLY != 0) || WIDE_WEIGHTED))
/* Registers are split among the 4 schedulers, a warp on one: 64-thread
 * blocks asked for 9 blocks at 112 registers got 96 and spilled. */
#define REG_BLOCKS (4 * (16384 / (32 * REGS_WANTED)) / WARPS)
#define MIN_BLOCKS (REG_BLOCKS > 0 ? REG_BLOCKS : 1)
#define XENT_BOUNDS __launch_bounds__(XENT_BLOCK, MIN_BLOCKS)

extern "C" __global__ void XENT_BOUNDS
xent_fwd(const unsigned char *__restrict__ logits, const target_t *__restrict__ targets,
         const float *__restrict__ weights, float *__restrict__ loss, float *__restrict__ lse_out,
         unsigned char *__restrict__ ws, int *__restrict__ err, long long n, int c,
         long long stride, long long ignore_index, float smoothing, int split) {
#ifdef XENT_C
    if (c != XENT_C) __trap(); /* a kernel compiled for another class count: never compute garbage */
    c = XENT_C;
#endif
    if ((split > 1) != XENT_SEGMENTED) __trap(); /* compiled for whole rows, launched split, or the reverse */
    if (!XENT_SEGMENTED) split = 1;               /* a constant, for the compiler */
#if XENT_ONE_BLOCK
    if (gridDim.x != 1) __trap(); /* compiled for a one-block launch: several blocks would each write the loss */
#endif
#if XENT_FINISH_APART && __CUDA_ARCH__ >= 900
    /* xent_fwd_finish may be scheduled once every block has started: it waits for the grid */
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    const kargs k = {logits, targets, weights, loss, lse_out, ws, err, n, stride, ignore_index, c, split, smoothing};
    double loss_acc = 0.0, weight_acc = 0.0;
#if XENT_TILE
    tile_rows(k, loss_acc, weight_acc);
#else
    team_rows(k, loss_acc, weight_acc);
#endif
#if XENT_REDUCTION != 0 && !XENT_SEGMENTED
    finish_reduction(loss_acc, weight_acc, loss, ws);
#endif
}

#if XENT_FINISH_APART
/* Partials a thread of xent_fwd_finish loads before it adds them. */
#define FINISH_LOADS 8

/* The loss from the blocks' partials (finish_reduction, XENT_FINISH_APART): one block of up
 * to 1024 threads launched after the grid, each thread summing partials i,
 * i + blockDim.x, ... in order, then the block's fixed tree. As the grid's
 * programmatic dependent it is resident before the grid ends and waits here
 * for the partials; launched plainly, the stream orders it. The block loads
 * FINISH_LOADS partials a thread at once: a grid of thousands of blocks is
 * summed in a round trip or two. */
extern "C" __global__ void __launch_bounds__(1024) xent_fwd_finish(float *__restrict__ loss,
                                                                   const unsigned char *__restrict__ ws,
                                                                   long long nparts) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const double2 *parts = (const double2 *)(ws + 16);
    const long long step = blockDim.x;
    double l = 0.0, wsum = 0.0;
    for (long long i = threadIdx.x; i < nparts; i += FINISH_LOADS * step) {
        double2 v[FINISH_LOADS];
#pragma unroll
        for (int u = 0; u < FINISH_LOADS; u++)
            v[u] = i + u * step < nparts ? published_d2(parts + i + u * step) : make_double2(0.0, 0.0);
#pragma unroll
        for (int u = 0; u < FINISH_LOADS; u++) {
            l += v[u].x;
            wsum += v[u].y;
        }
    }
    block_sum2(l, wsum, blockDim.x);
    if (threadIdx.x == 0) write_loss(loss, l, wsum);
}
#endif
