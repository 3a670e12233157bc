/*
 * xent_grad — softmax cross-entropy for training: the loss and its
 * gradient with respect to the logits from one read of the logits (fused),
 * the gradient from a forward's log-sum-exp (backward), the forward with
 * z-loss or soft-capping, and vocabulary shards (per-row partials, their
 * combination, and a shard's backward from the global log-sum-exp). One
 * template in seven parts that tools/embed.sh joins in name order:
 * 1_common (knob defaults, the launch's arguments, loads, exponentials,
 * soft-capping), 2_sums (running sums and their merges), 3_chunks (slices,
 * chunks and their loads), 4_gradient (an element's gradient and its
 * stores), 5_finish (the grid's sums, a row's loss), 6_row (one row),
 * 7_kernel (the entry points).
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
 *               flight through its reductions, at twice the chunk's registers;
 *               2: (fused, backward) the next row's first chunk is loaded into
 *               the registers the row's last gradient chunk frees, item by
 *               item as its gradient is stored: in flight through the rest
 *               of the gradient, at no registers beyond the one chunk
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
#define HELD_WORDS ((XENT_PREFETCH == 1 ? 2 : 1) * CHUNK_WORDS)
#define REG_CAP ((ESIZE == 4 ? 48 + 2 * HELD_WORDS : 56 + HELD_WORDS) + 4 * (EDGES - 1))
#define MIN_BLOCKS (65536 / (XENT_BLOCK * REG_CAP) > 0 ? 65536 / (XENT_BLOCK * REG_CAP) : 1)
#define ROW_PASS (XENT_MODE != 2)

#include "shared/checks.cuh"
#if XENT_STASH && (XENT_PREFETCH == 1 || XENT_TPR != XENT_BLOCK || XENT_MODE != 1)
#error "STASH takes the fused kernel, PREFETCH=0 or 2 and TPR == BLOCK"
#endif
#if XENT_PREFETCH == 2 && XENT_MODE == 0
#error "PREFETCH=2 hands the next row to a gradient's stores: the fused kernel or the backward"
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
