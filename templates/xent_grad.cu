/*
 * xent_grad.cu — softmax cross-entropy for training: the loss and its
 * gradient with respect to the logits from one read of the logits (fused),
 * the gradient from a forward's log-sum-exp (backward), the forward with
 * z-loss or soft-capping, and vocabulary shards (per-row partials, their
 * combination, and a shard's backward from the global log-sum-exp).
 *
 * A "team" of XENT_TPR threads takes one row; with XENT_SPLIT > 1 a cluster
 * of SPLIT blocks takes one row, each block a slice of it, and the blocks
 * exchange their partial sums through distributed shared memory. When a
 * block's slice fits one chunk (TPR * ITEMS vectors) the row stays in
 * registers between the sums and the gradient: one read, one write. Longer
 * slices are summed chunk by chunk, last to first, and the gradient pass
 * reads again all but the first chunk, which is still in registers (from L2
 * when the rows in flight fit it).
 *
 * Row loss (y the logits after soft-capping, lse = log sum exp y, C the whole
 * vocabulary, w the class weights or 1, W their sum, eps the smoothing):
 *   loss = (1-eps) w_t (lse - y_t) + eps/C sum_j w_j (lse - y_j) + z lse^2
 * and its gradient, times the row's factor f (dloss, over the weight sum for
 * a mean):
 *   dloss/dy_j = f (A p_j - (1-eps) w_t [j == t] - eps/C w_j),
 *   A = (1-eps) w_t + eps/C W + 2 z lse,  p_j = exp(y_j - lse)
 *   dy/dx = 1 - (y/cap)^2 under soft-capping.
 * Ignored rows have loss and gradient 0; a target outside the vocabulary
 * sets the error flag and makes its row NaN.
 *
 * Tuned knobs (gen/space.c holds the legal values):
 *   XENT_VEC    elements per vector load; VEC * element size in {4, 8, 16} bytes
 *   XENT_TPR    threads per row team: 1..32 share a warp, 64..1024 is the whole block
 *   XENT_BLOCK  threads per block; BLOCK % TPR == 0; TPR > 32 needs BLOCK == TPR
 *   XENT_ITEMS  vector loads per thread per chunk
 *   XENT_CACHE  0 plain loads, 1 read-only without L1 allocation, 2 streaming
 *   XENT_SPLIT  blocks of a cluster sharing a row (needs TPR == BLOCK)
 *   XENT_PREFETCH 1: the next chunk (or the next row's first) is loaded while
 *               this one is reduced and written: a team's loads stay in
 *               flight through its reductions, at twice the chunk's registers
 *   XENT_EVICT  1: L2 priorities for rows read twice: the first read is
 *               loaded evict-last and the second evict-first, and the
 *               gradient's stores evict first, so that what the second read
 *               needs stays in L2
 *   XENT_STASH  1: (fused, TPR == BLOCK, no PREFETCH) a row's chunks after
 *               the first wait in dynamic shared memory for the gradient,
 *               each thread reading back only what it wrote (no barrier),
 *               instead of being read again from L2 or memory
 *   XENT_FLAT   1: (backward, rows back to back) the gradient as one stream
 *               of n * C elements, a block a tile of BLOCK * ITEMS vectors
 *               wherever rows start and end (flat_backward)
 *   XENT_POLY   4, 8: one exponential in that many of a chunk's sums and of
 *               its gradient by a polynomial on the FMA pipe (poly_exp2),
 *               the rest by MUFU's ex2 (a fused element takes two)
 * Problem defines: XENT_LOGIT 0 fp32, 1 fp16, 2 bf16; XENT_TARGET 0 int32,
 *   1 int64; XENT_REDUCTION 0 none, 1 sum, 2 mean; XENT_WEIGHTS,
 *   XENT_SMOOTHING, XENT_LSE, XENT_ZLOSS, XENT_SOFTCAP, XENT_SHARD 0/1;
 *   XENT_MODE 0 forward, 1 fused, 2 backward.
 *
 * Entry points: xent_grad (the rows), xent_grad_denom (the mean's weight sum
 * and the class weights' sum, before a gradient), xent_grad_rescale (a fused
 * gradient times dloss) and xent_grad_combine (shards' partials into losses).
 *
 * Workspace (zeroed once; every launch leaves its tickets zero again):
 *   [0, 4) ticket of the rows' last block   [4, 8) ticket of denom's last block
 *   [16, 24) double: sum of w_t over non-ignored rows   [24, 32) double: W
 *   [32, 32 + 16 * DENOM_BLOCKS) denom's block partials
 *   then 16 bytes a block of xent_grad or xent_grad_combine: (loss, weight) partials
 */

#ifndef XENT_VEC
#define XENT_VEC 4
#endif
#ifndef XENT_TPR
#define XENT_TPR 256
#endif
#ifndef XENT_BLOCK
#define XENT_BLOCK 256
#endif
#ifndef XENT_ITEMS
#define XENT_ITEMS 4
#endif
#ifndef XENT_CACHE
#define XENT_CACHE 0
#endif
#ifndef XENT_SPLIT
#define XENT_SPLIT 1
#endif
#ifndef XENT_PREFETCH
#define XENT_PREFETCH 0
#endif
#ifndef XENT_EVICT
#define XENT_EVICT 0
#endif
#ifndef XENT_STASH
#define XENT_STASH 0
#endif
#ifndef XENT_FLAT
#define XENT_FLAT 0
#endif
#include "shared/problem.cuh"
#ifndef XENT_POLY
#define XENT_POLY 0
#endif
#ifndef XENT_ZLOSS
#define XENT_ZLOSS 0
#endif
#ifndef XENT_SOFTCAP
#define XENT_SOFTCAP 0
#endif
#ifndef XENT_SHARD
#define XENT_SHARD 0
#endif
#ifndef XENT_MODE
#define XENT_MODE 1
#endif

#define ESIZE (XENT_LOGIT == 0 ? 4 : 2)
#define VWORDS ((XENT_VEC * ESIZE) / 4)
#define VBYTES (XENT_VEC * ESIZE)
#define TEAMS (XENT_BLOCK / XENT_TPR)
#define WARPS (XENT_BLOCK / 32 > 0 ? XENT_BLOCK / 32 : 1)
/* Elements before a row's first aligned vector plus those after its last:
 * fewer than 2 VEC, spread over the team's lanes. */
#define EDGES ((2 * XENT_VEC - 2 + XENT_TPR - 1) / XENT_TPR > 0 ? (2 * XENT_VEC - 2 + XENT_TPR - 1) / XENT_TPR : 1)
#define FULL_MASK 0xffffffffu
#define LOG2E 1.4426950408889634f
#define DENOM_BLOCKS 256
#define PARTS_AT (32 + 16 * DENOM_BLOCKS)
#define GRAD (XENT_MODE != 0)
/* Blocks a multiprocessor should hold, so that warps of other rows hide a
 * row's reduction and barrier: a register cap of 48 plus two a word of each
 * fp32 chunk held (ptxas -v: the chunk's words live across the reduction,
 * and fewer spilled), or 56 plus one a word of a 16-bit chunk (held packed:
 * chunk_max takes no widened copies); and four for each edge scalar past the
 * first (a small team holds up to 2 VEC - 2 of them, with their columns). */
#define CHUNK_WORDS (XENT_ITEMS * VWORDS)
#define HELD_WORDS ((XENT_PREFETCH + 1) * CHUNK_WORDS)
#define REG_CAP ((ESIZE == 4 ? 48 + 2 * HELD_WORDS : 56 + HELD_WORDS) + 4 * (EDGES - 1))
#define MIN_BLOCKS (65536 / (XENT_BLOCK * REG_CAP) > 0 ? 65536 / (XENT_BLOCK * REG_CAP) : 1)
#define ROW_PASS (XENT_MODE != 2)

#include "shared/checks.cuh"
#if XENT_STASH && (XENT_PREFETCH || XENT_TPR != XENT_BLOCK || XENT_MODE != 1)
#error "STASH takes the fused kernel, PREFETCH=0 and TPR == BLOCK"
#endif
#if XENT_SPLIT > 1 && XENT_TPR != XENT_BLOCK
#error "SPLIT > 1 needs TPR == BLOCK (a cluster of whole-block teams)"
#endif
#if XENT_FLAT && (XENT_MODE != 2 || XENT_TPR != XENT_BLOCK || XENT_SPLIT > 1 || XENT_PREFETCH || XENT_EVICT)
#error "FLAT takes the backward, TPR == BLOCK, SPLIT=1, PREFETCH=0 and EVICT=0"
#endif

#include "shared/loads.cuh"

/* The launch's arguments, one struct by value; runtime/launch.c mirrors it. */
struct gargs {
    const unsigned char *logits;
    const target_t *targets;
    const float *weights;
    float *loss;
    float *lse;
    unsigned char *grad;
    const float *dloss;
    float *stats;
    unsigned char *ws;
    int *err;
    long long n, stride, ignore_index, c0;
    int c, vocab;
    float smoothing, z_loss, softcap;
    int shards;
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float qnan() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ float safe_max(float m) { return m == neg_inf() ? 0.0f : m; }

#include "shared/exp2.cuh"

/* Term q of a chunk (a constant once unrolled) on the FMA pipe: one in POLY. */
#define POLY_EVERY (XENT_POLY ? XENT_POLY : 1)
#define ON_FMA(q) (XENT_POLY && (q) % POLY_EVERY == POLY_EVERY - 1)
/* 2^x by MUFU or, on_fma, by the polynomial, which flushes below 2^-125 to 0
 * as ex2.approx.ftz flushes below 2^-126: a gradient of -inf logits is 0. */
__device__ __forceinline__ float exp2_term(float x, bool on_fma) {
    if (!on_fma) return fast_exp2(x);
    return x < -125.0f ? 0.0f : poly_exp2(x);
}

#if XENT_EVICT
/* keep: the first read of a row that is read again (evict last); else evict first. */
__device__ __forceinline__ unsigned long long l2_policy(bool keep) {
    unsigned long long p;
    if (keep) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
#endif

__device__ __forceinline__ void load_vec(const unsigned char *p, unsigned (&r)[VWORDS], bool keep) {
#if XENT_EVICT
    const unsigned long long pol = l2_policy(keep);
#if VWORDS == 4
    asm volatile(LD ".L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p), "l"(pol));
#elif VWORDS == 2
    asm volatile(LD ".L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(r[0]), "=r"(r[1]) : "l"(p), "l"(pol));
#else
    asm volatile(LD ".L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r[0]) : "l"(p), "l"(pol));
#endif
#elif VWORDS == 4
    asm volatile(LD ".v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
#elif VWORDS == 2
    asm volatile(LD ".v2.u32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
#else
    asm volatile(LD ".u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
#endif
}

#if XENT_EVICT
#define ST "st.global.cs"
#else
#define ST "st.global"
#endif
__device__ __forceinline__ void store_vec(unsigned char *p, const unsigned (&r)[VWORDS]) {
#if VWORDS == 4
    asm volatile(ST ".v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#elif VWORDS == 2
    asm volatile(ST ".v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(r[0]), "r"(r[1]) : "memory");
#else
    asm volatile(ST ".u32 [%0], %1;" :: "l"(p), "r"(r[0]) : "memory");
#endif
}

/* The gradient of 16-bit logits narrows as loaded logits widen (widen16). */
__device__ __forceinline__ unsigned short narrow(float f) {
    unsigned short h;
#if XENT_LOGIT == 1
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
#else
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
#endif
    return h;
}

/* A 16-bit element widens where it is used, each time (volatile asm): the
 * compiler otherwise keeps widened copies of a held chunk alive, and held
 * chunks spilled more at the same register cap. */
__device__ __forceinline__ float elem(const unsigned (&r)[VWORDS], int e) {
#if XENT_LOGIT == 0
    return __uint_as_float(r[e]);
#elif XENT_LOGIT == 1
    float f;
    if (e % 2) asm volatile("{.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, hi;}" : "=f"(f) : "r"(r[e / 2]));
    else asm volatile("{.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, lo;}" : "=f"(f) : "r"(r[e / 2]));
    return f;
#else
    unsigned u;
    if (e % 2) asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(u) : "r"(r[e / 2]));
    else asm volatile("shl.b32 %0, %1, 16;" : "=r"(u) : "r"(r[e / 2]));
    return __uint_as_float(u);
#endif
}
__device__ __forceinline__ void set_elem(unsigned (&r)[VWORDS], int e, float v) {
#if XENT_LOGIT == 0
    r[e] = __float_as_uint(v);
#else
    unsigned h = narrow(v);
    r[e / 2] = (e % 2) ? ((r[e / 2] & 0xffffu) | (h << 16)) : ((r[e / 2] & 0xffff0000u) | h);
#endif
}

__device__ __forceinline__ float load_scalar(const unsigned char *row, long long j) {
#if XENT_LOGIT == 0
    return ((const float *)row)[j];
#else
    return widen16(((const unsigned short *)row)[j]);
#endif
}
__device__ __forceinline__ void store_scalar(unsigned char *row, long long j, float v) {
#if XENT_LOGIT == 0
    ((float *)row)[j] = v;
#else
    ((unsigned short *)row)[j] = narrow(v);
#endif
}

/* The logit the softmax sees: capped as cap * tanh(x / cap) when soft-capping. */
__device__ __forceinline__ float capped(float x, float cap) {
#if XENT_SOFTCAP
    return cap * tanhf(x / cap);
#else
    return x;
#endif
}

__device__ __forceinline__ float class_weight(const float *w, long long j) {
#if XENT_WEIGHTS
    return w[j];
#else
    return 1.0f;
#endif
}

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

/* Where a row's aligned vectors start and how the cluster divides them. */
struct slice {
    const unsigned char *x; /* the row's logits */
    unsigned char *g;       /* the row's gradient */
    int head;               /* scalar elements before the first aligned vector */
    int nvec;               /* aligned vectors */
    int tail;               /* scalar elements after them */
    int v0, v1;             /* this block's vectors */
};

__device__ __forceinline__ slice make_slice(const gargs &k, long long row) {
    slice l;
    l.x = k.logits + (size_t)row * (size_t)k.stride * ESIZE;
    l.g = k.grad + (size_t)row * (size_t)k.stride * ESIZE;
    int mis = (int)(((size_t)l.x % VBYTES) / ESIZE);
    l.head = mis ? XENT_VEC - mis : 0;
    if (l.head > k.c) l.head = k.c;
    l.nvec = (k.c - l.head) / XENT_VEC;
    l.tail = k.c - l.head - l.nvec * XENT_VEC;
    int per = (l.nvec + XENT_SPLIT - 1) / XENT_SPLIT;
    l.v0 = (int)cluster_rank() * per;
    l.v1 = min(l.v0 + per, l.nvec);
    if (l.v0 > l.v1) l.v0 = l.v1;
    return l;
}

/* Edge element e (head first, then tail) of the row, or -1 past them. */
__device__ __forceinline__ int edge_index(const slice &l, int e) {
    if (e < l.head) return e;
    if (e < l.head + l.tail) return l.head + l.nvec * XENT_VEC + (e - l.head);
    return -1;
}

/* A thread's share of a chunk: ITEMS vectors and, in the first chunk of the
 * cluster's first block, EDGES scalars. Missing elements read as -inf. */
struct chunk {
    unsigned r[XENT_ITEMS][VWORDS];
    float e[EDGES];
    int ej[EDGES];
};

/* Byte offset of a lane's first vector of the chunk at vb within its row.
 * Item i lies ITEM_BYTES * i further on: a constant, which the load and
 * store instructions carry as their immediate offset. */
#define ITEM_BYTES (XENT_TPR * VBYTES)
__device__ __forceinline__ size_t lane_offset(const slice &l, int vb, int lane) {
    return (size_t)l.head * ESIZE + (size_t)(vb + lane) * VBYTES;
}
/* Item i of the lane is in the slice when i * TPR < lane_items(l, vb, lane):
 * one count, not a predicate an item. */
__device__ __forceinline__ int lane_items(const slice &l, int vb, int lane) { return l.v1 - vb - lane; }

__device__ __forceinline__ void fill_missing(unsigned (&r)[VWORDS]) {
#pragma unroll
    for (int w = 0; w < VWORDS; w++) r[w] = XENT_LOGIT == 0 ? 0xff800000u : XENT_LOGIT == 1 ? 0xfc00fc00u : 0xff80ff80u;
}

__device__ __forceinline__ void load_chunk(chunk &ch, const slice &l, int vb, int lane, bool edges, bool keep) {
    const unsigned char *p = l.x + lane_offset(l, vb, lane);
    const int rem = lane_items(l, vb, lane);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR < rem) load_vec(p + i * ITEM_BYTES, ch.r[i], keep);
        else fill_missing(ch.r[i]);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++) {
        ch.ej[q] = edges ? edge_index(l, q * XENT_TPR + lane) : -1;
        ch.e[q] = ch.ej[q] >= 0 ? load_scalar(l.x, ch.ej[q]) : neg_inf();
    }
}

/* Whether the fused kernel reads this slice twice: it does not fit a chunk,
 * and the chunks past the first are not stashed. */
__device__ __forceinline__ bool read_twice(const slice &l) {
    return XENT_MODE == 1 && !XENT_STASH && l.v1 - l.v0 > XENT_TPR * XENT_ITEMS;
}

#if XENT_STASH
extern __shared__ uint4 stash_mem[];
/* Where item i of the lane's share of the chunk at vb (past the first) waits. */
__device__ __forceinline__ unsigned *stash_at(const slice &l, int vb, int lane, int i) {
    return (unsigned *)stash_mem + (size_t)(vb - l.v0 - XENT_TPR * XENT_ITEMS + lane + i * XENT_TPR) * VWORDS;
}

__device__ __forceinline__ void stash_store(const chunk &ch, const slice &l, int vb, int lane) {
    const int rem = lane_items(l, vb, lane);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR >= rem) break;
        unsigned *s = stash_at(l, vb, lane, i);
#if VWORDS == 4
        *(uint4 *)s = make_uint4(ch.r[i][0], ch.r[i][1], ch.r[i][2], ch.r[i][3]);
#elif VWORDS == 2
        *(uint2 *)s = make_uint2(ch.r[i][0], ch.r[i][1]);
#else
        *s = ch.r[i][0];
#endif
    }
}

__device__ __forceinline__ void stash_load(chunk &ch, const slice &l, int vb, int lane) {
    const int rem = lane_items(l, vb, lane);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR < rem) {
            const unsigned *s = stash_at(l, vb, lane, i);
#if VWORDS == 4
            const uint4 v = *(const uint4 *)s;
            ch.r[i][0] = v.x, ch.r[i][1] = v.y, ch.r[i][2] = v.z, ch.r[i][3] = v.w;
#elif VWORDS == 2
            const uint2 v = *(const uint2 *)s;
            ch.r[i][0] = v.x, ch.r[i][1] = v.y;
#else
            ch.r[i][0] = *s;
#endif
        } else fill_missing(ch.r[i]);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++) ch.ej[q] = -1, ch.e[q] = neg_inf();
}
#endif

/* The chunk a row's first pass starts from. The fused kernel sums a row read
 * twice from its last chunk down to its first, so that the first (full, with
 * the edges) is the one still in registers when the gradient pass begins:
 * only the others are read again. */
__device__ __forceinline__ int first_vb(const slice &l) {
    const int chunk_vecs = XENT_TPR * XENT_ITEMS;
    return ROW_PASS && l.v1 > l.v0 ? l.v0 + (l.v1 - l.v0 - 1) / chunk_vecs * chunk_vecs : l.v0;
}

/* Pass 1's load of the chunk at vb: evict-last where pass 2 reads it again. */
__device__ __forceinline__ void load_pass1(chunk &ch, const slice &l, int vb, int lane, bool edges) {
    load_chunk(ch, l, vb, lane, edges && vb == l.v0, read_twice(l) && vb != l.v0);
}

/* The first chunk of the team's next row. */
__device__ __forceinline__ void load_next(chunk &ch, const gargs &k, long long next, int lane, bool edges) {
    const slice l = make_slice(k, next);
    load_pass1(ch, l, first_vb(l), lane, edges);
}

/* Element j of item i as the softmax sees it; slots past the slice are -inf
 * (soft-capping would make their -inf fill a finite -cap). */
__device__ __forceinline__ float y_of(const chunk &ch, int i, int j, bool valid, float cap) {
#if XENT_SOFTCAP
    return valid ? capped(elem(ch.r[i], j), cap) : neg_inf();
#else
    return elem(ch.r[i], j);
#endif
}
__device__ __forceinline__ float edge_y(const chunk &ch, int q, float cap) {
#if XENT_SOFTCAP
    return ch.ej[q] >= 0 ? capped(ch.e[q], cap) : neg_inf();
#else
    return ch.e[q];
#endif
}

/* Class index (within the c columns) of element j of vector v. */
__device__ __forceinline__ int vec_class(const slice &l, int v, int j) { return l.head + v * XENT_VEC + j; }

#if ROW_PASS
/* The largest logit of a lane's chunk (slots past the slice hold -inf).
 * 16-bit logits take the max of packed pairs and widen the one pair left:
 * widened copies kept for the sums would double a held chunk's registers. */
__device__ __forceinline__ float chunk_max(const chunk &ch, int rem, float cap) {
#if XENT_LOGIT != 0 && !XENT_SOFTCAP && __CUDA_ARCH__ >= 800
    unsigned w = ch.r[0][0];
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++)
#pragma unroll
        for (int q = 0; q < VWORDS; q++) w = max_pair(w, ch.r[i][q]);
    unsigned pair[VWORDS] = {w};
    return fmaxf(elem(pair, 0), elem(pair, 1));
#else
    float cm = neg_inf();
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++)
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) cm = fmaxf(cm, y_of(ch, i, j, i * XENT_TPR < rem, cap));
    return cm;
#endif
}

__device__ __forceinline__ void chunk_sums(acc &a, const chunk &ch, const slice &l, int vb, int lane,
                                           const gargs &k) {
    const int rem = lane_items(l, vb, lane);
    float cm = chunk_max(ch, rem, k.softcap);
#pragma unroll
    for (int q = 0; q < EDGES; q++) cm = fmaxf(cm, edge_y(ch, q, k.softcap));
    acc_rebase(a, fmaxf(a.m, cm));
    /* the subtraction first: the max's own term is exactly 1 (a row of one
     * class has loss 0, not a rounding of m * log2e) */
    const float m = safe_max(a.m);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        int v = vb + i * XENT_TPR + lane;
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) {
            float y = y_of(ch, i, j, i * XENT_TPR < rem, k.softcap);
            a.s += exp2_term((y - m) * LOG2E, ON_FMA(i * XENT_VEC + j));
#if XENT_SMOOTHING || XENT_SHARD
            if (i * XENT_TPR < rem) {
                float w = class_weight(k.weights, vec_class(l, v, j));
                a.sy += w * (y - a.m);
                a.sw += w;
            }
#endif
        }
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++) {
        float y = edge_y(ch, q, k.softcap);
        a.s += exp_shifted(y, m);
#if XENT_SMOOTHING || XENT_SHARD
        if (ch.ej[q] >= 0) {
            float w = class_weight(k.weights, ch.ej[q]);
            a.sy += w * (y - a.m);
            a.sw += w;
        }
#endif
    }
}
#endif

/* What the gradient of a row needs besides its logits. Every element but
 * the target's takes f (A p_j - eps/C w_j); the target's is rewritten after. */
struct rowg {
    float lse;
    float lse2;  /* lse * log2e: p_j = 2^(y_j log2e - lse2) for 16-bit logits */
    float fa;    /* f A */
    float fe;    /* f eps / C (times w_j with weights) */
    float ft;    /* f (1-eps) w_t: subtracted at the target */
    long long t; /* the target's column in this slice's row, or -1 */
    float xt;    /* the target's logit, read before any gradient store (in place) */
};

/* p_j: fp32 gradients subtract first (the FFMA's rounding of lse * log2e
 * is 2^-24 |lse| relative, over fp32's own rounding at |lse| ~ 40); 16-bit
 * ones round far coarser and take the single FFMA. */
__device__ __forceinline__ float softmax_p(float y, const rowg &r, bool on_fma) {
#if XENT_LOGIT == 0
    return exp2_term((y - r.lse) * LOG2E, on_fma);
#else
    return exp2_term(fmaf(y, LOG2E, -r.lse2), on_fma);
#endif
}

/* g through the soft-capping: d(cap tanh(x / cap))/dx = 1 - (y / cap)^2. */
__device__ __forceinline__ float cap_slope(float g, float y, const gargs &k) {
#if XENT_SOFTCAP
    float u = y / k.softcap;
    g *= 1.0f - u * u;
#endif
    return g;
}

__device__ __forceinline__ float grad_of(float x, int col, const rowg &r, const gargs &k, bool on_fma = false) {
    float y = capped(x, k.softcap);
    float p = softmax_p(y, r, on_fma);
#if XENT_SMOOTHING
    float g = fmaf(r.fa, p, -r.fe * class_weight(k.weights, col));
#else
    float g = r.fa * p;
#endif
    return cap_slope(g, y, k);
}

/* The target's element: the one-hot term too. */
__device__ __forceinline__ float grad_at_target(const rowg &r, const gargs &k) {
    float y = capped(r.xt, k.softcap);
    float p = softmax_p(y, r, false);
    float g = fmaf(r.fa, p, -r.ft);
#if XENT_SMOOTHING
    g -= r.fe * class_weight(k.weights, r.t);
#endif
    return cap_slope(g, y, k);
}

/* Two fp32 values into one word of the logits' 16-bit type, one instruction. */
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
#if XENT_LOGIT == 1
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
#endif
    return w;
}

__device__ __forceinline__ void store_chunk_grad(const chunk &ch, const slice &l, int vb, int lane, const rowg &r,
                                                 const gargs &k, bool active) {
    unsigned char *p = l.g + lane_offset(l, vb, lane);
    const int rem = lane_items(l, vb, lane);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        int v = vb + i * XENT_TPR + lane;
        if (!active || i * XENT_TPR >= rem) continue;
        unsigned o[VWORDS];
#if XENT_LOGIT == 0
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++)
            o[j] = __float_as_uint(grad_of(elem(ch.r[i], j), vec_class(l, v, j), r, k, ON_FMA(i * XENT_VEC + j)));
#else
#pragma unroll
        for (int j = 0; j < XENT_VEC; j += 2)
            o[j / 2] = pack2(grad_of(elem(ch.r[i], j), vec_class(l, v, j), r, k, ON_FMA(i * XENT_VEC + j)),
                             grad_of(elem(ch.r[i], j + 1), vec_class(l, v, j + 1), r, k, ON_FMA(i * XENT_VEC + j + 1)));
#endif
        store_vec(p + i * ITEM_BYTES, o);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++)
        if (active && ch.ej[q] >= 0) store_scalar(l.g, ch.ej[q], grad_of(ch.e[q], ch.ej[q], r, k));
}

/* Whether this block's slice holds column col (edges belong to rank 0). */
__device__ __forceinline__ bool slice_holds(const slice &l, long long col) {
    if (col < 0) return false;
    if (col < l.head || col >= l.head + (long long)l.nvec * XENT_VEC) return cluster_rank() == 0;
    long long v = (col - l.head) / XENT_VEC;
    return v >= l.v0 && v < l.v1;
}

__device__ __forceinline__ const double *ws_sums(const gargs &k) { return (const double *)(k.ws + 16); }

/* The factor, A and the one-hot term of a row with target t (vocabulary
 * index) and log-sum-exp lse. */
__device__ __forceinline__ rowg row_grad_terms(const gargs &k, long long row, long long t, float lse, bool bad,
                                               float xt) {
    rowg r;
    r.lse = lse;
    r.lse2 = lse * LOG2E;
    float eps_c = k.smoothing / (float)k.vocab;
    r.t = t - k.c0;
    if (t == k.ignore_index || bad || r.t < 0 || r.t >= k.c) r.t = -1;
    float wt = (t == k.ignore_index || bad) ? 0.0f : class_weight(k.weights, XENT_SHARD ? 0 : t);
    float W = XENT_WEIGHTS ? (float)ws_sums(k)[1] : (float)k.vocab;
    float onehot = (1.0f - k.smoothing) * wt;
    float a = onehot + eps_c * W + (XENT_ZLOSS ? 2.0f * k.z_loss * lse : 0.0f);
    float f = k.dloss ? k.dloss[XENT_REDUCTION == 0 ? row : 0] : 1.0f;
#if XENT_REDUCTION == 2
    f = (float)((double)f / ws_sums(k)[0]);
#endif
    f = t == k.ignore_index ? 0.0f : bad ? qnan() : f;
    r.fa = f * a;
    r.fe = f * eps_c;
    r.ft = f * onehot;
    r.xt = xt;
    return r;
}

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

/* One row of this team (or cluster). Returns the row's (loss, weight).
 * cur: with PREFETCH, the row's first chunk on entry (already loading) and
 * the first chunk of the row `next` on return (next < 0: none). The chunk
 * after the one in use is always in flight: the row's next chunk, pass 2's
 * first (the row again, from L2), or the next row's first. */
__device__ __forceinline__ double2 do_row(const gargs &k, long long row, bool active, int lane, int parity,
                                          chunk &cur, long long next) {
    const slice l = make_slice(k, row);
    const bool edges = cluster_rank() == 0;
    const long long t = (long long)k.targets[row];
    const bool bad = target_bad(t, k);
    const int chunk_vecs = XENT_TPR * XENT_ITEMS;
    /* the target's logit, loaded first: its latency hides under the row's,
     * and an in-place gradient has not overwritten it yet */
    const long long tc = t - k.c0;
    const bool has_t = lane == 0 && !bad && t != k.ignore_index && tc >= 0 && tc < k.c && (edges || GRAD);
    const float xt = has_t ? load_scalar(l.x, tc) : 0.0f;
#if XENT_PREFETCH
    chunk nx;
#endif
    float lse;
    double2 out = make_double2(0.0, 0.0);
#if ROW_PASS
    acc a;
    acc_init(a);
    for (int vb = first_vb(l);; vb -= chunk_vecs) {
        const bool more = vb > l.v0;
#if XENT_PREFETCH
        if (more) load_pass1(nx, l, vb - chunk_vecs, lane, edges);
        else if (GRAD && read_twice(l)) load_chunk(nx, l, l.v0 + chunk_vecs, lane, false, false);
        else if (next >= 0) load_next(nx, k, next, lane, edges);
        chunk_sums(a, cur, l, vb, lane, k);
        if (!more) break;
        cur = nx;
#else
        load_pass1(cur, l, vb, lane, edges);
        chunk_sums(a, cur, l, vb, lane, k);
#if XENT_STASH
        if (more) stash_store(cur, l, vb, lane);
#endif
        if (!more) break;
#endif
    }
    team_merge(a);
#if XENT_SPLIT > 1
    cluster_merge(a, parity);
#endif
    lse = a.m == neg_inf() ? neg_inf() : safe_max(a.m) + logf(a.s);
    out = row_out(k, row, t, bad, capped(xt, k.softcap), a, lse, active && lane == 0 && edges);
#else
    lse = k.lse[row];
    if (active && lane == 0 && edges && bad) atomicOr(k.err, 1);
#endif
#if GRAD
    const rowg r = row_grad_terms(k, row, t, lse, bad, xt);
    /* the fused kernel's first chunk is still in registers; the others (and
     * all of the backward's) are read here */
    for (int vb = l.v0;; vb += chunk_vecs) {
        const bool more = vb + chunk_vecs < l.v1;
#if XENT_PREFETCH
        if (vb != l.v0 || !ROW_PASS) { /* pass 1 left the fused kernel's next chunk in nx */
            if (more) load_chunk(nx, l, vb + chunk_vecs, lane, false, false);
            else if (next >= 0) load_next(nx, k, next, lane, edges);
        }
        store_chunk_grad(cur, l, vb, lane, r, k, active);
        cur = nx;
#else
#if XENT_STASH
        if (vb != l.v0) stash_load(cur, l, vb, lane);
#else
        if (vb != l.v0 || !ROW_PASS) load_chunk(cur, l, vb, lane, edges && vb == l.v0, false);
#endif
        store_chunk_grad(cur, l, vb, lane, r, k, active);
#endif
        if (!more) break;
    }
    team_barrier();
    if (active && has_t && slice_holds(l, r.t)) store_scalar(l.g, r.t, grad_at_target(r, k));
#elif XENT_PREFETCH
    cur = nx;
#endif
    return out;
}

#if XENT_FLAT
#define FLAT_TILE (XENT_BLOCK * XENT_ITEMS)

/* An element's gradient from its row's terms: the target's takes the
 * one-hot term too. */
__device__ __forceinline__ float flat_grad(float x, long long col, const rowg &r, const gargs &k) {
    if (col != r.t) return grad_of(x, (int)col, r, k);
    rowg rt = r;
    rt.xt = x;
    return grad_at_target(rt, k);
}

/* Element e of the stream, alone: the stream's edges. */
__device__ __forceinline__ void flat_scalar(const gargs &k, long long e, long long r0, const rowg *rows) {
    const long long row = e / k.c;
    store_scalar(k.grad, e, flat_grad(load_scalar(k.logits, e), e - row * k.c, rows[row - r0], k));
}

/* The backward of rows back to back as one stream of n C elements, so that
 * no row start costs scalar edges or a short last chunk: the vectors start at
 * the first aligned element, block b takes FLAT_TILE of them lane by lane as
 * a streaming read does, block 0 takes the elements before them and the
 * last vector's block those after. While a block's loads are in flight, a
 * thread a row computes the terms of the rows the block covers into shared
 * memory (space.c's flat_rows bounds them by BLOCK). */
__device__ __forceinline__ void flat_backward(const gargs &k) {
    __shared__ rowg rows[XENT_BLOCK];
    const long long total = k.n * (long long)k.c;
    const int mis = (int)(((size_t)k.logits % VBYTES) / ESIZE);
    const long long head = min((long long)(mis ? XENT_VEC - mis : 0), total);
    const long long nvec = (total - head) / XENT_VEC, tail = head + nvec * XENT_VEC;
    const long long v0 = (long long)blockIdx.x * FLAT_TILE, last = nvec > 0 ? (nvec - 1) / FLAT_TILE : 0;
    if ((long long)blockIdx.x > last) return;
    const unsigned char *x = k.logits + head * ESIZE;
    unsigned char *g = k.grad + head * ESIZE;
    unsigned r[XENT_ITEMS][VWORDS];
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        const long long v = v0 + i * XENT_BLOCK + threadIdx.x;
        if (v < nvec) load_vec(x + v * VBYTES, r[i], false);
    }
    const long long lo = blockIdx.x == 0 ? 0 : head + v0 * XENT_VEC;
    const long long hi = (long long)blockIdx.x == last ? total - 1 : head + min(v0 + FLAT_TILE, nvec) * XENT_VEC - 1;
    const long long r0 = lo / k.c;
    if (threadIdx.x < hi / k.c - r0 + 1) {
        const long long row = r0 + threadIdx.x, t = (long long)k.targets[row];
        const bool bad = target_bad(t, k);
        if (bad) atomicOr(k.err, 1);
        rows[threadIdx.x] = row_grad_terms(k, row, t, k.lse[row], bad, 0.0f);
    }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x < head) flat_scalar(k, threadIdx.x, r0, rows);
    if ((long long)blockIdx.x == last && threadIdx.x < total - tail) flat_scalar(k, tail + threadIdx.x, r0, rows);
    /* the row of a vector's first element by a float quotient, off by at most one */
    const float inv_c = 1.0f / (float)k.c;
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        const long long v = v0 + i * XENT_BLOCK + threadIdx.x;
        if (v >= nvec) continue;
        const long long rel = head + v * XENT_VEC - r0 * k.c;
        int q = (int)((float)rel * inv_c);
        long long col = rel - (long long)q * k.c;
        if (col < 0) q--, col += k.c;
        else if (col >= k.c) q++, col -= k.c;
        float gv[XENT_VEC];
        if (col + XENT_VEC <= k.c) {
#pragma unroll
            for (int j = 0; j < XENT_VEC; j++) gv[j] = flat_grad(elem(r[i], j), col + j, rows[q], k);
        } else { /* the vector crosses into the next row */
#pragma unroll
            for (int j = 0; j < XENT_VEC; j++) {
                const bool next = col + j >= k.c;
                gv[j] = flat_grad(elem(r[i], j), next ? col + j - k.c : col + j, rows[q + next], k);
            }
        }
        unsigned o[VWORDS];
#if XENT_LOGIT == 0
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) o[j] = __float_as_uint(gv[j]);
#else
#pragma unroll
        for (int j = 0; j < XENT_VEC; j += 2) o[j / 2] = pack2(gv[j], gv[j + 1]);
#endif
        store_vec(g + v * VBYTES, o);
    }
}
#endif

extern "C" __global__ void
#if XENT_SPLIT > 1
__cluster_dims__(XENT_SPLIT, 1, 1)
#endif
__launch_bounds__(XENT_BLOCK, MIN_BLOCKS) xent_grad(const gargs k) {
#if XENT_FLAT
    flat_backward(k);
    return;
#endif
    const int team = threadIdx.x / XENT_TPR, lane = threadIdx.x % XENT_TPR;
    const long long groups = (k.n + TEAMS - 1) / TEAMS;
    const long long first = blockIdx.x / XENT_SPLIT, step = gridDim.x / XENT_SPLIT;
    double l = 0.0, w = 0.0;
    int parity = 0;
    chunk cur;
#if XENT_PREFETCH
    if (first < groups) {
        const slice l0 = make_slice(k, min(first * TEAMS + team, k.n - 1));
        load_pass1(cur, l0, first_vb(l0), lane, cluster_rank() == 0);
    }
#endif
    for (long long g = first; g < groups; g += step, parity ^= 1) {
        long long row = g * TEAMS + team;
        bool active = row < k.n;
        long long next = g + step < groups ? min((g + step) * TEAMS + team, k.n - 1) : -1;
        double2 o = do_row(k, active ? row : k.n - 1, active, lane, parity, cur, next);
        l += o.x;
        w += o.y;
    }
#if XENT_SPLIT > 1
    cluster_sync(); /* no block leaves while another reads its shared memory */
#endif
#if ROW_PASS && !XENT_SHARD && XENT_REDUCTION != 0
    finish(l, w, k.loss, (unsigned *)k.ws, (double2 *)(k.ws + PARTS_AT), XENT_BLOCK);
#endif
}

#if XENT_REDUCTION == 2 || XENT_WEIGHTS
/* Before a gradient: the mean's sum of the non-ignored rows' target weights
 * and the sum W of the class weights, by DENOM_BLOCKS blocks of 256 and the
 * last of them in a fixed order. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_denom(const gargs k) {
    double d = 0.0, W = 0.0;
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < k.n; i += 256ll * gridDim.x) {
        long long t = (long long)k.targets[i];
        if (t != k.ignore_index && t >= 0 && t < k.vocab) d += class_weight(k.weights, XENT_SHARD ? 0 : t);
    }
#if XENT_WEIGHTS
    for (long long j = blockIdx.x * 256ll + threadIdx.x; j < k.c; j += 256ll * gridDim.x) W += k.weights[j];
#endif
    unsigned *ticket = (unsigned *)(k.ws + 4);
    double2 t;
    if (!grid_sum2(d, W, t, ticket, (double2 *)(k.ws + 32), 256)) return;
    if (threadIdx.x == 0) {
        double *sums = (double *)(k.ws + 16);
        sums[0] = t.x;
        sums[1] = t.y;
        *ticket = 0u;
    }
}
#endif

/* A fused gradient (dloss taken as 1) times dloss, in place: a block takes
 * rows; a row whose factor is exactly 1 is left alone. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_rescale(const gargs k) {
#if XENT_REDUCTION != 0
    const float f = k.dloss[0];
    if (f == 1.0f) return;
#endif
    for (long long row = blockIdx.x; row < k.n; row += gridDim.x) {
#if XENT_REDUCTION == 0
        const float f = k.dloss[row];
        if (f == 1.0f) continue;
#endif
        unsigned char *g = k.grad + (size_t)row * (size_t)k.stride * ESIZE;
        for (int j = threadIdx.x; j < k.c; j += 256) store_scalar(g, j, load_scalar(g, j) * f);
    }
}

/* Shards' partials into each row's loss and global log-sum-exp: stats holds
 * shards blocks of 2n floats (the rows' lse over the shard, then their
 * linear part). A thread per row. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_combine(const gargs k) {
    double l = 0.0, w = 0.0;
    for (long long row = blockIdx.x * 256ll + threadIdx.x; row < k.n; row += 256ll * gridDim.x) {
        float m = neg_inf(), lin = 0.0f;
        for (int s = 0; s < k.shards; s++) {
            m = fmaxf(m, k.stats[(size_t)s * 2 * k.n + row]);
            lin += k.stats[(size_t)s * 2 * k.n + k.n + row];
        }
        float sum = 0.0f;
        for (int s = 0; s < k.shards; s++) sum += exp_shifted(k.stats[(size_t)s * 2 * k.n + row], safe_max(m));
        float lse = m == neg_inf() ? m : safe_max(m) + logf(sum);
        long long t = (long long)k.targets[row];
        bool bad = target_bad(t, k);
        if (bad) atomicOr(k.err, 1);
        float loss = t == k.ignore_index ? 0.0f : bad ? qnan() : lse - lin;
#if XENT_ZLOSS
        if (t != k.ignore_index) loss += k.z_loss * lse * lse;
#endif
        if (k.lse) k.lse[row] = lse;
#if XENT_REDUCTION == 0
        k.loss[row] = loss;
#else
        l += loss;
        w += (t == k.ignore_index || bad) ? 0.0 : 1.0;
#endif
    }
#if XENT_REDUCTION != 0
    finish(l, w, k.loss, (unsigned *)k.ws, (double2 *)(k.ws + PARTS_AT), 256);
#endif
}
