/*
 * xent_fwd.cu — softmax cross-entropy forward (PyTorch F.cross_entropy with
 * class-index targets), one template for every configuration.
 *
 * A "team" of XENT_TPR threads reduces one row, or one segment of a row when
 * the launch splits rows (split > 1: segment partials are combined by the
 * last team to finish the row). Teams walk the rows in a grid-stride loop so
 * a persistent grid works; the sum/mean is fused: per-block partials (double)
 * are summed in a fixed order by the last block, so results are bitwise
 * deterministic for a given plan.
 *
 * Tuned knobs (gen/space.c holds the table of legal values and constraints):
 *   XENT_VEC     elements per vector load; XENT_VEC * element size in {4, 8, 16} bytes
 *   XENT_TPR     threads per row team: 1..32 share a warp, 64..512 is the whole block
 *   XENT_BLOCK   threads per block; BLOCK % TPR == 0; TPR > 32 needs BLOCK == TPR
 *   XENT_ITEMS   vector loads per thread per chunk (the registers hold ITEMS*VEC elements)
 *   XENT_PASSES  1: online max and sum in one read; 2: team max first, then the sum,
 *                from registers when a segment fits one chunk, else re-reading it
 *   XENT_CACHE   0 plain loads, 1 read-only without L1 allocation, 2 streaming (evict first)
 *   XENT_POLY    4, 8: (16-bit logits) one term in that many of a chunk's sum is computed
 *                by a polynomial on the FMA pipe (poly_exp2), the others by MUFU's ex2, so
 *                that neither pipe alone paces a chunk
 *   XENT_TILE    1: tiny rows, a thread per row (TPR == 1). Each warp stages 32 whole rows
 *                into its own shared-memory region with VEC-wide loads, several in flight
 *                per lane, synchronising with __syncwarp only; then each lane reduces its
 *                row from shared memory. Dynamic shared memory: WARPS regions of
 *                32 * row_stride + VEC elements, each rounded up to 16 bytes
 * Problem defines (set from the problem, never tuned):
 *   XENT_LOGIT 0 fp32, 1 fp16, 2 bf16;  XENT_TARGET 0 int32, 1 int64;
 *   XENT_REDUCTION 0 none, 1 sum, 2 mean;  XENT_WEIGHTS, XENT_SMOOTHING, XENT_LSE 0/1
 *   XENT_DYNAMIC 1 for PERSIST=2: a persistent grid whose units claim item groups
 *                from a counter (rendered from the launch knob; see team_rows)
 *   XENT_C       the class count, rendered for small c only (gen/render.c): tiny rows are
 *                instruction bound, and a constant c drops the items no row can fill and
 *                unrolls the per-row loops exactly. The argument c must equal it
 * Launch parameters (not compiled in): split (teams per row) and the grid size.
 *
 * Workspace (zeroed once; every launch leaves its counters zero again):
 *   [0, 4)                  unsigned ticket of the last block
 *   [8, 16)                 the work counter of dynamic scheduling (PERSIST=2)
 *   [16, 16 + 16*grid)      double2 per-block partials (loss, weight)
 *   then, when split > 1:   int row_arrivals[n] (16-aligned), float partials[n*split*PART_FLOATS]
 *                           (16-aligned), double2 row results[n] (summed in row order, so
 *                           the result does not depend on which team finished a row)
 */

#ifndef XENT_VEC
#define XENT_VEC 4
#endif
#ifndef XENT_TPR
#define XENT_TPR 32
#endif
#ifndef XENT_BLOCK
#define XENT_BLOCK 128
#endif
#ifndef XENT_ITEMS
#define XENT_ITEMS 8
#endif
#ifndef XENT_PASSES
#define XENT_PASSES 1
#endif
#ifndef XENT_CACHE
#define XENT_CACHE 0
#endif
#ifndef XENT_TILE
#define XENT_TILE 0
#endif
#ifndef XENT_POLY
#define XENT_POLY 0
#endif
#ifndef XENT_DYNAMIC
#define XENT_DYNAMIC 0
#endif
#define POLY_EVERY (XENT_POLY ? XENT_POLY : 1)
#ifndef XENT_LOGIT
#define XENT_LOGIT 0
#endif
#ifndef XENT_TARGET
#define XENT_TARGET 1
#endif
#ifndef XENT_REDUCTION
#define XENT_REDUCTION 2
#endif
#ifndef XENT_WEIGHTS
#define XENT_WEIGHTS 0
#endif
#ifndef XENT_SMOOTHING
#define XENT_SMOOTHING 0
#endif
#ifndef XENT_LSE
#define XENT_LSE 0
#endif

#define ESIZE (XENT_LOGIT == 0 ? 4 : 2)
#define VWORDS ((XENT_VEC * ESIZE) / 4)
#define TEAMS (XENT_BLOCK / XENT_TPR)
#define CHUNK (XENT_TPR * XENT_ITEMS)
#ifdef XENT_C
/* Items a lane can ever hold: a row has at most C/VEC vectors, so item k of
 * every lane lies past them once k * TPR >= C/VEC (ceil division). */
#define NV_MAX (XENT_C / XENT_VEC)
#define ITEMS_LIVE ((NV_MAX + XENT_TPR - 1) / XENT_TPR < XENT_ITEMS ? (NV_MAX + XENT_TPR - 1) / XENT_TPR : XENT_ITEMS)
/* Items every lane holds in a whole row: even misaligned (head < VEC) it has
 * NV_MIN vectors, and item k of lane TPR - 1 is vector k * TPR + TPR - 1. */
#define NV_MIN ((XENT_C - XENT_VEC + 1) / XENT_VEC)
#define ITEMS_SURE (NV_MIN / XENT_TPR < ITEMS_LIVE ? NV_MIN / XENT_TPR : ITEMS_LIVE)
#else
#define ITEMS_LIVE XENT_ITEMS
#define ITEMS_SURE 0
#endif
#define WARPS (XENT_BLOCK / 32 > 0 ? XENT_BLOCK / 32 : 1)
#define PART_FLOATS (3 + XENT_SMOOTHING * (1 + XENT_WEIGHTS))
#define LOG2E 1.4426950408889634f
/* The work counter of dynamic scheduling, in the workspace header (see above). */
#define WORK_COUNTER(ws) ((unsigned long long *)((ws) + 8))
#define FULL_MASK 0xffffffffu
/* A word of -inf logits (one fp32, two fp16 or two bf16): what missing vectors read as. */
#define NEG_INF_WORD (XENT_LOGIT == 0 ? 0xff800000u : XENT_LOGIT == 1 ? 0xfc00fc00u : 0xff80ff80u)

#if (XENT_VEC * ESIZE) != 4 && (XENT_VEC * ESIZE) != 8 && (XENT_VEC * ESIZE) != 16
#error "XENT_VEC * element size must be 4, 8 or 16 bytes"
#endif
#if XENT_BLOCK % XENT_TPR != 0 || (XENT_TPR > 32 && XENT_BLOCK != XENT_TPR)
#error "BLOCK must be a multiple of TPR, and equal to it when TPR > 32"
#endif
#if XENT_TILE && XENT_TPR != 1
#error "TILE needs TPR == 1"
#endif
#if XENT_POLY && (XENT_LOGIT == 0 || XENT_TILE)
#error "POLY needs 16-bit logits and TILE == 0"
#endif

#if XENT_CACHE == 0
#define LD "ld.global"
#elif XENT_CACHE == 1
#define LD "ld.global.nc.L1::no_allocate"
#else
#define LD "ld.global.cs"
#endif

#if XENT_TARGET == 0
typedef int target_t;
#else
typedef long long target_t;
#endif

/* A segment's running state; merged across lanes, teams and segments. */
struct acc {
    float m;  /* running max */
    float s;  /* sum of exp(x - m) */
    float xt; /* the target's logit (0 on lanes that do not hold it) */
#if XENT_SMOOTHING
    float sx; /* sum of x (weighted by class weight) */
#if XENT_WEIGHTS
    float sw; /* sum of class weights */
#endif
#endif
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/* 2^x in one MUFU instruction: flushing results below 2^-126 to zero costs
 * nothing measurable in a sum that holds at least 1 (the max's own term). */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* exp(x - m) with m a shift from safe_max. The subtraction comes first so
 * that x == m gives exactly 1: an fma(x, log2e, -m*log2e) keeps the rounding
 * of m*log2e and drifts every rescale by up to 2^(|m| * 6e-8). */
__device__ __forceinline__ float exp_shifted(float x, float m) {
    return fast_exp2((x - m) * LOG2E);
}

/* The same shift for a chunk's many logits at one FFMA each, not a subtraction
 * and a product: terms 2^(x*log2e - ml2), with ml2 = m*log2e rounded, are off
 * by exactly 2^delta, delta = m*log2e - ml2 (an fma gives it), and their sum
 * is corrected once. So no drift from rescale to rescale. Past |m| = 2^22,
 * delta could near 1 and the terms overflow: those chunks subtract first. */
struct shift {
    float m;    /* from safe_max */
    float ml2;  /* m * log2e, rounded */
    float fix;  /* 2^-delta */
    bool ffma;  /* |m| < 2^22 */
};

__device__ __forceinline__ shift make_shift(float m) {
    shift h;
    h.m = m;
    h.ml2 = m * LOG2E;
    h.fix = fast_exp2(-fmaf(m, LOG2E, -h.ml2));
    h.ffma = fabsf(m) < 4194304.0f;
    return h;
}

/* 2^x without the MUFU unit, for x < 2^22: x = j + f, j an integer (the
 * 1.5 * 2^23 rounding trick) and |f| <= 1/2; 2^f from a degree-5 minimax
 * polynomial (relative error 1.8e-7 in fp32 Horner, about ex2.approx's), times
 * 2^j built in the exponent bits. The product, not an integer add to p's
 * exponent, keeps NaN a NaN. Below -125 it gives 2^-125 where ex2.ftz gives 0:
 * nothing in a sum that holds at least 1. About 11 FMA and ALU instructions. */
__device__ __forceinline__ float poly_exp2(float x) {
    const float y = x < -125.0f ? -125.0f : x; /* NaN compares false: kept */
    const float t = y + 12582912.0f;
    const float f = y - (t - 12582912.0f);
    float p = 1.3282305e-3f;
    p = fmaf(p, f, 9.6755894e-3f);
    p = fmaf(p, f, 5.5506952e-2f);
    p = fmaf(p, f, 2.4022119e-1f);
    p = fmaf(p, f, 6.9314700e-1f);
    p = fmaf(p, f, 1.0000001f);
    /* t's low bits hold j: (j + 127) << 23 is 2^j, the constant's bits shift out */
    return p * __int_as_float((__float_as_int(t) + 127) << 23);
}

/* One term of a shift; FFMA is h.ffma, a constant so that each path is straight
 * code; on_fma (a constant) takes the term off the MUFU pipe. */
template <bool FFMA>
__device__ __forceinline__ float shifted_term(float x, const shift &h, bool on_fma = false) {
    if (!FFMA) return exp_shifted(x, h.m);
    const float e = fmaf(x, LOG2E, -h.ml2);
    return on_fma ? poly_exp2(e) : fast_exp2(e);
}

/* ln(s) of a row's sum: 1 <= s <= c when its max is finite, else 0, inf or
 * NaN, which lg2 maps as logf does. MUFU's log2 (CUDA's __logf) is within
 * 2^-21.4 absolute on [0.5, 2] and 3 ulp beyond: far inside the 1e-5 of
 * max(|lse|, 1) a row promises, in 2 instructions where logf took 22, a
 * tenth of a tiny row. */
__device__ __forceinline__ float log_sum(float s) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(s));
    return y * 0.6931471805599453f;
}

/* A max usable as a shift: an all -inf prefix keeps the sum at 0, not NaN. */
__device__ __forceinline__ float safe_max(float m) { return m == neg_inf() ? 0.0f : m; }

__device__ __forceinline__ void load_vec(const unsigned char *p, unsigned (&r)[VWORDS]) {
#if VWORDS == 4
    asm(LD ".v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
#elif VWORDS == 2
    asm(LD ".v2.u32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
#else
    asm(LD ".u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
#endif
}

#if XENT_LOGIT != 0
/* A 16-bit logit (fp16 or bf16 bits) as fp32. */
__device__ __forceinline__ float widen16(unsigned short h) {
#if XENT_LOGIT == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return __uint_as_float(((unsigned)h) << 16);
#endif
}
#endif

/* Element e of a loaded vector, as fp32. */
__device__ __forceinline__ float elem(const unsigned (&r)[VWORDS], int e) {
#if XENT_LOGIT == 0
    return __uint_as_float(r[e]);
#elif XENT_LOGIT == 1
    return widen16((unsigned short)(r[e / 2] >> (16 * (e % 2))));
#else
    /* the high half needs no shift */
    return __uint_as_float((e % 2) ? (r[e / 2] & 0xffff0000u) : (r[e / 2] << 16));
#endif
}

__device__ __forceinline__ float load_scalar(const unsigned char *row, long long j) {
#if XENT_LOGIT == 0
    return __ldg((const float *)row + j);
#else
    return widen16(__ldg((const unsigned short *)row + j));
#endif
}

__device__ __forceinline__ void acc_init(acc &a) {
    a.m = neg_inf();
    a.s = 0.0f;
    a.xt = 0.0f;
#if XENT_SMOOTHING
    a.sx = 0.0f;
#if XENT_WEIGHTS
    a.sw = 0.0f;
#endif
#endif
}

/* Everything but max and sum for one valid element j of the row. */
__device__ __forceinline__ void acc_side(acc &a, float x, int j, int t, const float *__restrict__ w) {
    if (j == t) a.xt = x;
#if XENT_SMOOTHING
#if XENT_WEIGHTS
    float wj = __ldg(w + j);
    a.sx = fmaf(wj, x, a.sx);
    a.sw += wj;
#else
    a.sx += x;
#endif
#endif
}

/* Merge b into a: rescale both sums to the larger max. */
__device__ __forceinline__ void acc_merge(acc &a, const acc &b) {
    float m = fmaxf(a.m, b.m);
    float shift = safe_max(m);
    a.s = a.s * exp_shifted(a.m, shift) + b.s * exp_shifted(b.m, shift);
    a.m = m;
    a.xt += b.xt;
#if XENT_SMOOTHING
    a.sx += b.sx;
#if XENT_WEIGHTS
    a.sw += b.sw;
#endif
#endif
}

__device__ __forceinline__ acc acc_shfl_xor(const acc &a, int o) {
    acc b;
    b.m = __shfl_xor_sync(FULL_MASK, a.m, o);
    b.s = __shfl_xor_sync(FULL_MASK, a.s, o);
    b.xt = __shfl_xor_sync(FULL_MASK, a.xt, o);
#if XENT_SMOOTHING
    b.sx = __shfl_xor_sync(FULL_MASK, a.sx, o);
#if XENT_WEIGHTS
    b.sw = __shfl_xor_sync(FULL_MASK, a.sw, o);
#endif
#endif
    return b;
}

/* Team-wide merge; every lane ends with the team's total. Called by every
 * thread of the block the same number of times (teams of a warp in step). */
__device__ __forceinline__ void team_merge(acc &a) {
    const int width = XENT_TPR < 32 ? XENT_TPR : 32;
#pragma unroll
    for (int o = width / 2; o > 0; o >>= 1) acc_merge(a, acc_shfl_xor(a, o));
#if XENT_TPR > 32
    __shared__ acc warp_acc[WARPS];
    if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = a;
    __syncthreads();
    a = warp_acc[0];
#pragma unroll
    for (int i = 1; i < WARPS; i++) acc_merge(a, warp_acc[i]);
    __syncthreads();
#endif
}

__device__ __forceinline__ float team_max(float m) {
    const int width = XENT_TPR < 32 ? XENT_TPR : 32;
#pragma unroll
    for (int o = width / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, o));
#if XENT_TPR > 32
    __shared__ float warp_max[WARPS];
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    m = warp_max[0];
#pragma unroll
    for (int i = 1; i < WARPS; i++) m = fmaxf(m, warp_max[i]);
    __syncthreads();
#endif
    return m;
}

/* Where a row's elements lie: `head` scalars before the first aligned vector,
 * nv vectors, then the tail scalars up to c. */
struct row_layout {
    const unsigned char *p;
    int head, nv;
};

__device__ __forceinline__ row_layout layout(const unsigned char *logits, long long row,
                                             long long stride, int c) {
    row_layout l;
    l.p = logits + (size_t)row * (size_t)stride * ESIZE;
    int mis = (int)(((size_t)l.p / ESIZE) % XENT_VEC);
    l.head = mis ? min(XENT_VEC - mis, c) : 0;
    l.nv = (c - l.head) / XENT_VEC;
    return l;
}

__device__ __forceinline__ const unsigned char *vec_addr(const row_layout &l, int v) {
    return l.p + (size_t)(l.head + v * XENT_VEC) * ESIZE;
}

/* Load the (up to) ITEMS vectors of this lane in chunk vb; missing ones read as -inf.
 * Addresses are one base plus constant offsets, so they cost no registers.
 * The first `sure` items (a constant) are known to be there: no test, no fill;
 * so are all of a chunk that ends inside the segment (the usual one: a test
 * per chunk, uniform in the team, where the fills took one move per word). */
__device__ __forceinline__ void load_chunk(const row_layout &l, int vb, int v1, int lane,
                                           unsigned (&r)[XENT_ITEMS][VWORDS], int sure = 0) {
    const unsigned char *base = vec_addr(l, vb + lane);
    const int valid = v1 - (vb + lane);
    if (vb + CHUNK <= v1) {
#pragma unroll
        for (int k = 0; k < ITEMS_LIVE; k++) load_vec(base + k * XENT_TPR * XENT_VEC * ESIZE, r[k]);
        return;
    }
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++) {
        if (k < sure || k * XENT_TPR < valid) {
            load_vec(base + k * XENT_TPR * XENT_VEC * ESIZE, r[k]);
        } else {
#pragma unroll
            for (int q = 0; q < VWORDS; q++) r[k][q] = NEG_INF_WORD;
        }
    }
}

#if XENT_LOGIT != 0 && __CUDA_ARCH__ >= 800
/* The max of two packed pairs, pair by pair, as fmaxf treats NaN (dropped). */
__device__ __forceinline__ unsigned max_pair(unsigned a, unsigned b) {
    unsigned d;
#if XENT_LOGIT == 1
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
}
#endif

__device__ __forceinline__ float chunk_max(const unsigned (&r)[XENT_ITEMS][VWORDS]) {
#if XENT_LOGIT == 0 || __CUDA_ARCH__ < 800 /* max.f16x2 and max.bf16x2 came with sm_80 */
    float m = neg_inf();
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++)
#pragma unroll
        for (int e = 0; e < XENT_VEC; e++) m = fmaxf(m, elem(r[k], e));
    return m;
#else
    /* 16-bit pairs stay packed: half the instructions, and the registers
     * hold the chunk as loaded rather than widened */
#if ITEMS_LIVE == 0 /* rows shorter than a vector: all scalars */
    (void)r;
    return neg_inf();
#else
    unsigned m2 = r[0][0];
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++) /* the items past ITEMS_LIVE are never loaded */
#pragma unroll
        for (int q = 0; q < VWORDS; q++)
            if (k || q) m2 = max_pair(m2, r[k][q]);
    return fmaxf(widen16((unsigned short)(m2 & 0xffffu)), widen16((unsigned short)(m2 >> 16)));
#endif
#endif
}

/* Element i (item i / VEC, element i % VEC) of a loaded chunk, i < ITEMS_LIVE * VEC.
 * Registers cannot be indexed (that would go through local memory), so this
 * is a select tree on the bits of the word index: ITEMS_LIVE * VWORDS - 1
 * selects, where comparing i with every element cost two instructions each. */
/* Chunks of at most this many words pick the target with a select tree. */
#define PICK_WORDS_MAX 16
#if ITEMS_LIVE > 0 && ITEMS_LIVE * VWORDS <= PICK_WORDS_MAX
__device__ __forceinline__ float pick(const unsigned (&r)[XENT_ITEMS][VWORDS], int i) {
    const int n = ITEMS_LIVE * VWORDS;
    const int word = i / (XENT_VEC / VWORDS);
    unsigned v[ITEMS_LIVE * VWORDS];
#pragma unroll
    for (int j = 0; j < n; j++) v[j] = r[j / VWORDS][j % VWORDS];
#pragma unroll
    for (int b = 0; (1 << b) < n; b++) {
        const bool hi = (word >> b) & 1;
#pragma unroll
        for (int j = 0; j + (1 << b) < n; j += 2 << b) v[j] = hi ? v[j + (1 << b)] : v[j];
    }
#if XENT_LOGIT == 0
    return __uint_as_float(v[0]);
#elif XENT_LOGIT == 1
    return widen16((unsigned short)((i & 1) ? v[0] >> 16 : v[0]));
#else
    return __uint_as_float((i & 1) ? (v[0] & 0xffff0000u) : (v[0] << 16));
#endif
}
#endif

/* The sum of a loaded chunk's terms; the -inf the missing vectors read as add 0. */
template <bool FFMA>
__device__ __forceinline__ float exp_sum(const unsigned (&r)[XENT_ITEMS][VWORDS], const shift &h) {
    float s[2] = {0.0f, 0.0f}; /* two chains: half the dependent adds; each starts at its first term, not 0 + it */
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++)
#pragma unroll
        for (int e = 0; e < XENT_VEC; e++) {
            const int i = k * XENT_VEC + e;
            const float x = shifted_term<FFMA>(elem(r[k], e), h, XENT_POLY && i % POLY_EVERY == POLY_EVERY - 1);
            s[i & 1] = i < 2 ? x : s[i & 1] + x;
        }
    return s[0] + s[1];
}

/* The sum of exp(x - m) of a loaded chunk (a.m is the shift); the target and side sums go into a. */
__device__ __forceinline__ float chunk_sum(acc &a, const unsigned (&r)[XENT_ITEMS][VWORDS],
                                           const row_layout &l, int vb, int v1, int lane, int t,
                                           const float *__restrict__ w) {
    const float ml = safe_max(a.m);
    const int valid = v1 - (vb + lane);
    const int j_lane = l.head + (vb + lane) * XENT_VEC; /* first element of item 0 */
#if ITEMS_LIVE > 0 /* else rows shorter than a vector: all scalars */
    /* The target's owner picks it out of registers (no extra load per row), before the
     * sum widens 16-bit logits into more registers.
     * It lies d elements past this lane's first, in item q / TPR when q = d / VEC
     * is a multiple of TPR below the lane's loaded vectors (valid). */
    const unsigned d = (unsigned)(t - j_lane), q = d / XENT_VEC;
    if (d < (unsigned)(ITEMS_LIVE * XENT_TPR * XENT_VEC) && q % XENT_TPR == 0 && (int)q < valid) {
#if ITEMS_LIVE * VWORDS <= PICK_WORDS_MAX
        a.xt = pick(r, (int)(q / XENT_TPR * XENT_VEC + d % XENT_VEC));
#else
        /* a select tree over a big chunk needs half its registers again (a
         * 64-word fp32 chunk spilled at 96): compare per item instead */
        const int kt = (int)(q / XENT_TPR), et = (int)(d % XENT_VEC);
#pragma unroll
        for (int k = 0; k < ITEMS_LIVE; k++)
#pragma unroll
            for (int e = 0; e < XENT_VEC; e++)
                if (k == kt && e == et) a.xt = elem(r[k], e);
#endif
    }
#else
    (void)t;
    (void)j_lane;
    (void)valid;
#endif
    const shift h = make_shift(ml);
    const float sum = h.ffma ? exp_sum<true>(r, h) * h.fix : exp_sum<false>(r, h);
#if XENT_SMOOTHING
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++)
        if (k * XENT_TPR < valid) {
#pragma unroll
            for (int e = 0; e < XENT_VEC; e++)
                acc_side(a, elem(r[k], e), j_lane + k * XENT_TPR * XENT_VEC + e, -1, w);
        }
#else
    (void)w;
#endif
    return sum;
}

/* The scalar elements (head and tail) of a row, on lanes round-robin. */
__device__ __forceinline__ float scalars_max(const row_layout &l, int c, int lane) {
    float m = neg_inf();
    for (int j = lane; j < l.head; j += XENT_TPR) m = fmaxf(m, load_scalar(l.p, j));
    for (int j = l.head + l.nv * XENT_VEC + lane; j < c; j += XENT_TPR)
        m = fmaxf(m, load_scalar(l.p, j));
    return m;
}

__device__ __forceinline__ void scalar_sum(acc &a, const row_layout &l, int j, int t,
                                           const float *__restrict__ w) {
    float x = load_scalar(l.p, j);
    a.s += exp_shifted(x, safe_max(a.m));
    acc_side(a, x, j, t, w);
}

__device__ __forceinline__ void scalars_sum(acc &a, const row_layout &l, int c, int lane, int t,
                                            const float *__restrict__ w) {
    for (int j = lane; j < l.head; j += XENT_TPR) scalar_sum(a, l, j, t, w);
    for (int j = l.head + l.nv * XENT_VEC + lane; j < c; j += XENT_TPR) scalar_sum(a, l, j, t, w);
}

/* One loaded chunk into the online state: rescale the sum to the new max, add. */
__device__ __forceinline__ void online_chunk(acc &a, const unsigned (&r)[XENT_ITEMS][VWORDS],
                                             const row_layout &l, int vb, int v1, int lane, int t,
                                             const float *__restrict__ w) {
    float m = fmaxf(a.m, chunk_max(r));
    a.s *= exp_shifted(a.m, safe_max(m));
    a.m = m;
    a.s += chunk_sum(a, r, l, vb, v1, lane, t, w);
}

/* This lane's share of segment [v0, v1) (vectors), plus the scalars when asked. */
__device__ __forceinline__ acc segment(const row_layout &l, int v0, int v1, bool scalars, int c,
                                       int lane, int t, const float *__restrict__ w, bool one_chunk,
                                       bool whole) {
    acc a;
    acc_init(a);
    unsigned r[XENT_ITEMS][VWORDS];
    /* one test for the usual row of aligned vectors only, not four loop checks */
    scalars = scalars && (l.head > 0 || l.head + l.nv * XENT_VEC < c);
#if XENT_PASSES == 1
    (void)one_chunk;
    (void)whole;
    if (scalars) {
        a.m = scalars_max(l, c, lane);
        scalars_sum(a, l, c, lane, t, w);
    }
    for (int vb = v0; vb < v1; vb += CHUNK) {
        load_chunk(l, vb, v1, lane, r);
        online_chunk(a, r, l, vb, v1, lane, t, w);
    }
#else
    float m = scalars ? scalars_max(l, c, lane) : neg_inf();
    if (one_chunk) {
        /* masked: an empty segment reads nothing; a whole row has ITEMS_SURE items */
        if (ITEMS_SURE > 0 && whole) load_chunk(l, v0, v1, lane, r, ITEMS_SURE);
        else load_chunk(l, v0, v1, lane, r);
        a.m = team_max(fmaxf(m, chunk_max(r)));
        a.s = chunk_sum(a, r, l, v0, v1, lane, t, w);
    } else {
        for (int vb = v0; vb < v1; vb += CHUNK) {
            load_chunk(l, vb, v1, lane, r);
            m = fmaxf(m, chunk_max(r));
        }
        a.m = team_max(m);
        for (int vb = v0; vb < v1; vb += CHUNK) {
            load_chunk(l, vb, v1, lane, r);
            a.s += chunk_sum(a, r, l, vb, v1, lane, t, w);
        }
    }
    if (scalars) scalars_sum(a, l, c, lane, t, w);
#endif
    return a;
}

struct row_result {
    float loss;   /* the row's loss (0 ignored, NaN bad target) */
    float weight; /* its weight in the mean's denominator */
};

__device__ __forceinline__ row_result finish_row(const acc &a, long long t, long long ignore_index,
                                                 int c, float smoothing,
                                                 const float *__restrict__ w, int *err,
                                                 float *lse_out, long long row) {
    const float log_s = log_sum(a.s);
    const float lse = a.m + log_s;
#if XENT_LSE
    lse_out[row] = lse;
#else
    (void)lse; /* smoothing may still use it */
    (void)lse_out;
    (void)row;
#endif
    row_result r;
    if (t == ignore_index) {
        r.loss = 0.0f;
        r.weight = 0.0f;
        return r;
    }
    if (t < 0 || t >= c) {
        atomicOr(err, 1);
        r.loss = __int_as_float(0x7fc00000);
        r.weight = 0.0f;
        return r;
    }
#if XENT_WEIGHTS
    float wt = __ldg(w + t);
#else
    (void)w;
    float wt = 1.0f;
#endif
    float nll = wt * ((a.m - a.xt) + log_s); /* from x - max, as log_softmax: exact for huge logits */
#if XENT_SMOOTHING
#if XENT_WEIGHTS
    float smooth = __fmul_rn(lse, a.sw) - a.sx; /* no fma: c == 1 must give exactly 0 */
#else
    float smooth = lse * (float)c - a.sx;
#endif
    r.loss = (1.0f - smoothing) * nll + (smoothing / (float)c) * smooth;
#else
    (void)smoothing;
    r.loss = nll;
#endif
    r.weight = wt;
    return r;
}

__device__ __forceinline__ target_t load_target(const target_t *targets, long long row) {
    return __ldg(targets + row);
}


#if XENT_TILE
#if XENT_LOGIT == 0
typedef unsigned tile_t;
#define TILE_LD ".u32"
#else
typedef unsigned short tile_t;
#define TILE_LD ".u16"
#endif
/* Vector loads a lane issues before storing any: with one in flight at a
 * time, latency, not bandwidth, bounds a warp's staging (a group of 32 rows
 * of 10 fp32 is 80 16-byte vectors, one batch for the warp). */
#define TILE_BATCH 4
#define VBYTES (XENT_VEC * ESIZE)

__device__ __forceinline__ tile_t load_raw(const unsigned char *p) {
    tile_t v;
#if XENT_LOGIT == 0
    asm(LD TILE_LD " %0, [%1];" : "=r"(v) : "l"(p));
#else
    asm(LD TILE_LD " %0, [%1];" : "=h"(v) : "l"(p));
#endif
    return v;
}

/* In asm: NVVM split the first store of a batch into four words, even with
 * __builtin_assume_aligned. The clobber keeps it before the tile's reads.
 * a is a shared-space address: converted once per group, not per store. */
__device__ __forceinline__ void store_vec(unsigned a, const unsigned (&r)[VWORDS]) {
#if VWORDS == 4
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "r"(a), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#elif VWORDS == 2
    asm volatile("st.shared.v2.u32 [%0], {%1,%2};" :: "r"(a), "r"(r[0]), "r"(r[1]) : "memory");
#else
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(r[0]) : "memory");
#endif
}

__device__ __forceinline__ float tile_elem(tile_t v) {
#if XENT_LOGIT == 0
    return __uint_as_float(v);
#else
    return widen16(v);
#endif
}

/* Rows this short are read into registers once and reduced unrolled. */
#define TILE_UNROLL_C 32

/* One thread's row, read from the staged tile: max, then the sums. The
 * target is read by its index, not found by comparing it with every j. */
__device__ __forceinline__ acc tile_row(const tile_t *x, int c, int t, const float *__restrict__ w) {
    acc a;
    acc_init(a);
#if defined(XENT_C) && XENT_C <= TILE_UNROLL_C
    (void)c;
    float v[XENT_C];
#pragma unroll
    for (int j = 0; j < XENT_C; j++) v[j] = tile_elem(x[j]);
    float m = neg_inf(); /* not v[0]: fmaxf drops NaN as the loop below does */
#pragma unroll
    for (int j = 0; j < XENT_C; j++) m = fmaxf(m, v[j]);
    a.m = m;
    const float ml = safe_max(m);
    float s[2] = {0.0f, 0.0f}; /* two chains, each from its first term */
#pragma unroll
    for (int j = 0; j < XENT_C; j++) {
        const float e = exp_shifted(v[j], ml);
        s[j & 1] = j < 2 ? e : s[j & 1] + e;
        acc_side(a, v[j], j, -1, w);
    }
    a.s = s[0] + s[1];
#else
    float m = neg_inf();
    for (int j = 0; j < c; j++) m = fmaxf(m, tile_elem(x[j]));
    a.m = m;
    const float ml = safe_max(m);
    for (int j = 0; j < c; j++) {
        float v = tile_elem(x[j]);
        a.s += exp_shifted(v, ml);
        acc_side(a, v, j, -1, w);
    }
#endif
    if (t >= 0) a.xt = tile_elem(x[t]);
    return a;
}

/* Stage the span of rows [r0, r0 + rows) ((rows - 1) * stride + c elements)
 * into a warp's region and return mis, the span start's misalignment in
 * elements. Element i goes to index i + mis, so the span's aligned vectors
 * land on aligned shared addresses: one vector store each. The few scalars
 * before the first aligned vector and after the last take a lane each. */
__device__ __forceinline__ int stage_warp(unsigned char *region, const unsigned char *logits, long long r0,
                                          int rows, int c, long long stride, int lane) {
    const unsigned char *src = logits + (size_t)r0 * (size_t)stride * ESIZE;
    const int mis = (int)(((size_t)src / ESIZE) % XENT_VEC);
    const int count = (int)((rows - 1) * stride + c);
    const int head = mis ? min(XENT_VEC - mis, count) : 0;
    const int nv = (count - head) / XENT_VEC;
    const int tail = head + nv * XENT_VEC;
    tile_t *dst = (tile_t *)region + mis;
    /* head and tail are shorter than a vector, so a lane each suffices */
    const bool has_head = lane < head, has_tail = lane < count - tail;
    tile_t head_x = 0, tail_x = 0;
    if (has_head) head_x = load_raw(src + (size_t)lane * ESIZE);
    if (has_tail) tail_x = load_raw(src + (size_t)(tail + lane) * ESIZE);
    const unsigned char *vsrc = src + (size_t)head * ESIZE;
    const unsigned vdst = (unsigned)__cvta_generic_to_shared(dst + head);
    /* a batch covers a group of tiny rows: unrolled, the loop only took registers */
#pragma unroll 1
    for (int v = lane; v < nv; v += 32 * TILE_BATCH) {
        unsigned r[TILE_BATCH][VWORDS];
#pragma unroll
        for (int k = 0; k < TILE_BATCH; k++)
            if (v + 32 * k < nv) load_vec(vsrc + (size_t)(v + 32 * k) * VBYTES, r[k]);
#pragma unroll
        for (int k = 0; k < TILE_BATCH; k++)
            if (v + 32 * k < nv) store_vec(vdst + (unsigned)(v + 32 * k) * VBYTES, r[k]);
    }
    if (has_head) dst[lane] = head_x;
    if (has_tail) dst[tail + lane] = tail_x;
    return mis;
}
#endif

/* Reads of what other blocks published, from L2. CUDA's __ldcg is volatile
 * asm without a memory clobber; the clobber also keeps these after every
 * plain load and store before them, not only after the fence. */
__device__ __forceinline__ float published_f(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
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

/* Split rows: publish this segment's partial; the row's last segment combines
 * all of them in segment order (deterministic) and returns true. */
__device__ bool combine_split(acc &a, long long row, int seg, int split, unsigned *arrivals,
                              float *parts) {
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
    if (arrive(arrivals + row) != (unsigned)(split - 1)) return false;
    acc_init(a);
    for (int k = 0; k < split; k++) {
        const float *q = parts + ((size_t)row * split + k) * PART_FLOATS;
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
        acc_merge(a, b);
    }
    arrivals[row] = 0; /* leave the workspace zeroed for the next launch */
    return true;
}

#if XENT_REDUCTION != 0
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* Fixed-shape block sum: same inputs, same order, same bits. */
__device__ __forceinline__ void block_sum2(double &x, double &y) {
    __shared__ double sx[32], sy[32];
    x = warp_sum_d(x);
    y = warp_sum_d(y);
    if (XENT_BLOCK <= 32) return;
    if (threadIdx.x % 32 == 0) {
        sx[threadIdx.x / 32] = x;
        sy[threadIdx.x / 32] = y;
    }
    __syncthreads();
    x = 0.0;
    y = 0.0;
    if (threadIdx.x < 32) {
        x = threadIdx.x < WARPS ? sx[threadIdx.x] : 0.0;
        y = threadIdx.x < WARPS ? sy[threadIdx.x] : 0.0;
        x = warp_sum_d(x);
        y = warp_sum_d(y);
    }
    __syncthreads();
}

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

/* Last-block reduction of the per-block partials (and, for split rows, the
 * per-row results) into the scalar loss, in a fixed order. */
__device__ void finish_reduction(double loss_acc, double weight_acc, float *loss,
                                 unsigned char *ws, const double *row_results, long long n) {
    __shared__ bool last;
    unsigned *ticket = (unsigned *)ws;
    double2 *parts = (double2 *)(ws + 16);
    block_sum2(loss_acc, weight_acc);
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_double2(loss_acc, weight_acc);
        last = arrive(ticket) == gridDim.x - 1; /* releases the partial, acquires the rest */
    }
    /* orders the other threads' reads after thread 0's acquire */
    __syncthreads();
    if (!last) return;
    double l = 0.0, wsum = 0.0;
    sum_published(parts, threadIdx.x, gridDim.x, l, wsum);
    if (row_results) sum_published((const double2 *)row_results, threadIdx.x, n, l, wsum);
    block_sum2(l, wsum);
    if (threadIdx.x == 0) {
        /* A zero weight sum makes PyTorch's nll mean 0/0: NaN, whatever the smoothing term. */
        *loss = XENT_REDUCTION != 2 ? (float)l : wsum == 0.0 ? __int_as_float(0x7fc00000) : (float)(l / wsum);
        *ticket = 0u;
#if XENT_DYNAMIC
        *WORK_COUNTER(ws) = 0ull;
#endif
    }
}
#elif XENT_DYNAMIC
/* Without a reduction, dynamic scheduling still needs a last block: it zeroes
 * the counter once every block has stopped taking work. */
__device__ void reset_counter(unsigned char *ws) {
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd((unsigned *)ws, 1u) == gridDim.x - 1) {
        *(unsigned *)ws = 0u;
        *WORK_COUNTER(ws) = 0ull;
    }
}
#endif

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
/* Lane 0 of a team with its item's total: a finished row goes out, a
 * segment is published and the row's last segment combines them. */
__device__ __forceinline__ void publish_item(const kargs &k, acc &a, long long row, int seg, long long t,
                                             double &loss_acc, double &weight_acc) {
    if (k.split == 1) { /* one test: split rows' addressing stays off this path */
        emit_row(k, row, finish_row(a, t, k.ignore_index, k.c, k.smoothing, k.weights, k.err, k.lse, row),
                 loss_acc, weight_acc);
        return;
    }
    if (!combine_split(a, row, seg, k.split, split_arrivals(k), split_parts(k))) return;
    row_result r = finish_row(a, t, k.ignore_index, k.c, k.smoothing, k.weights, k.err, k.lse, row);
#if XENT_REDUCTION != 0
    double *res = split_results(k) + 2 * row;
    res[0] = r.loss;
    res[1] = r.weight;
#else
    emit_row(k, row, r, loss_acc, weight_acc);
#endif
}

/* One work item for this team: a row, or one segment of it (split > 1). */
__device__ __forceinline__ void team_item(const kargs &k, long long w, bool active, int lane, bool one_chunk,
                                          double &loss_acc, double &weight_acc) {
    /* split == 1 is uniform: its rows skip the 64-bit division and the segment bounds */
    const bool whole = k.split == 1;
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
    if (lane == 0 && active) publish_item(k, a, row, seg, t, loss_acc, weight_acc);
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

#if !XENT_DYNAMIC
/* Static (PERSIST 0, 1): block b takes item groups b, b + grid, ... */
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
#else
/* Dynamic (PERSIST=2, rendered as XENT_DYNAMIC so static kernels keep their
 * registers): units (a warp of teams when TPR <= 32, else the block's team)
 * take their first item group by position, then claim the next from a
 * counter as they start the current one, so the atomic's latency hides
 * behind the row and no unit is left with a last round the others lack. */
__device__ __forceinline__ void team_rows(const kargs &k, double &loss_acc, double &weight_acc) {
    const int lane = threadIdx.x % XENT_TPR;
    const long long work = k.n * k.split;
    const bool one_chunk = fits_one_chunk(k);
    unsigned long long *counter = WORK_COUNTER(k.ws);
#if XENT_TPR <= 32
    const int per_unit = 32 / XENT_TPR;
    const int in_unit = (threadIdx.x % 32) / XENT_TPR;
    const long long units = (long long)gridDim.x * WARPS;
    long long g = (long long)blockIdx.x * WARPS + threadIdx.x / 32;
    const long long groups = (work + per_unit - 1) / per_unit;
    while (g < groups) {
        unsigned long long next = 0;
        if (threadIdx.x % 32 == 0) next = atomicAdd(counter, 1ull);
        const long long w = g * per_unit + in_unit;
        team_item(k, w, w < work, lane, one_chunk, loss_acc, weight_acc);
        g = (long long)__shfl_sync(FULL_MASK, next, 0) + units;
    }
#else
    __shared__ unsigned long long claimed;
    long long g = blockIdx.x;
    while (g < work) {
        unsigned long long next = 0;
        if (threadIdx.x == 0) next = atomicAdd(counter, 1ull);
        team_item(k, g, true, lane, one_chunk, loss_acc, weight_acc);
        /* team_item's team_merge barrier keeps thread 0 from overwriting
         * this before every thread has read it */
        if (threadIdx.x == 0) claimed = next;
        __syncthreads();
        g = (long long)claimed + gridDim.x;
    }
#endif
}
#endif
#endif

/* Left alone, ptxas' occupancy heuristic squeezed some configs into 32 or 40
 * registers and spilled; asking for one block per SM let others grow to 127
 * where 96 suffice. So ask for the blocks that leave each thread its chunk
 * plus room for addresses and sums (a little more for
 * the dynamic schedule's claim: at 96, 64-logit chunks spilled 24-80 bytes;
 * and for weighted smoothing, whose class weights are loaded beside the
 * chunk: a bf16 thread-per-row chunk of 64 spilled 12 bytes at 128). */
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
#if XENT_LOGIT == 0 || XENT_SMOOTHING || SHORT_ROWS
#define CHUNK_REGS (XENT_ITEMS * XENT_VEC + 32)
#else
/* 16-bit chunks stay packed through the max (chunk_max): a bf16 chunk of 64
 * logits fit 72 registers without spilling where it took 96 widened. Not
 * with smoothing, whose side sums widen the chunk again (a bf16 chunk of 64
 * with weights spilled 16 bytes at 128). */
#define CHUNK_REGS (XENT_ITEMS * VWORDS + 40)
#endif
#if SHORT_ROWS
#define REGS_FLOOR 48
#elif XENT_LOGIT == 0 || XENT_SMOOTHING
#define REGS_FLOOR 80
#else
#define REGS_FLOOR 72
#endif
#define REGS_CHUNK CHUNK_REGS
#define REGS_WANTED                                                                                  \
    ((REGS_CHUNK > REGS_FLOOR ? REGS_CHUNK : REGS_FLOOR) + 32 * XENT_SMOOTHING + 16 * XENT_SMOOTHING * XENT_WEIGHTS + \
     16 * XENT_DYNAMIC)
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
    const kargs k = {logits, targets, weights, loss, lse_out, ws, err, n, stride, ignore_index, c, split, smoothing};
    double loss_acc = 0.0, weight_acc = 0.0;
#if XENT_TILE
    tile_rows(k, loss_acc, weight_acc);
#else
    team_rows(k, loss_acc, weight_acc);
#endif
#if XENT_REDUCTION != 0
    finish_reduction(loss_acc, weight_acc, loss, ws, split > 1 ? split_results(k) : NULL, n);
#elif XENT_DYNAMIC
    reset_counter(ws);
#endif
}
