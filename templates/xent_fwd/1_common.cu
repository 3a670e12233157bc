/*
 * xent_fwd — softmax cross-entropy forward (PyTorch F.cross_entropy with
 * class-index targets), one template for every configuration, in five parts
 * that tools/embed.sh joins in name order: 1_common (knob defaults, sums,
 * loads, team reductions), 2_row (the row path), 3_tile (the tile path),
 * 4_finish (split rows and the reduction's block partials), 5_kernel (the row
 * loops, the entry point and xent_fwd_finish).
 *
 * A "team" of XENT_TPR threads reduces one row, or one segment of a row when
 * the launch splits rows (split > 1: segment partials are combined by the
 * last team to finish the row). Teams walk the rows in a grid-stride loop so
 * a persistent grid works; for a sum or mean, per-block partials (double)
 * are summed in a fixed order by the last block or by xent_fwd_finish,
 * launched after the grid (XENT_FINISH_APART), so results are bitwise
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
 *   XENT_SEGMENTED 1 when SPLIT > 1 (rendered from the launch knob): only such
 *                kernels hold the split rows' addressing and combine, whose
 *                registers would otherwise weigh on every kernel's row loop
 *   XENT_C       the class count, rendered for small c only (gen/render.c): tiny rows are
 *                instruction bound, and a constant c drops the items no row can fill and
 *                unrolls the per-row loops exactly. The argument c must equal it
 *   XENT_ONE_BLOCK 1 for a sum or mean of whole rows whose launch is one block (gen/render.c):
 *                that block writes the loss from its own sums (finish_reduction). The grid
 *                must be one block
 *   XENT_EDGES_ONCE 1 for such a kernel whose rows have scalar edges wherever the logits start
 *                (xent_fwd_edges_once, gen/space.c): a lane loads its edges once (scalars_once)
 *   XENT_FINISH_APART 1 for a sum or mean of whole rows of 32 MB of logits or more, not one
 *                block (xent_fwd_finish_apart, gen/space.c): xent_fwd_finish, launched after
 *                the grid, sums the block partials
 * Launch parameters (not compiled in): split (teams per row; > 1 under
 * XENT_SEGMENTED, 1 otherwise) and the grid size.
 *
 * Workspace (zeroed once; every launch leaves its counters zero again):
 *   [0, 4)                  unsigned ticket of the last block (not XENT_FINISH_APART)
 *   [4, 8)                  unsigned count of the rows finished (split rows, sum or mean), or
 *                           of the segments when few rows are merged in one level (one_level)
 *   [8, 16)                 unused
 *   [16, 16 + 16*grid)      double2 per-block partials (loss, weight)
 *   then, when split > 1:   int row_arrivals[n] (16-aligned), float partials[n*split*PART_FLOATS]
 *                           (16-aligned), double2 row results[n] (summed in a fixed order by
 *                           the last row's team, so the result does not depend on which
 *                           team finished a row)
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
#ifndef XENT_SEGMENTED
#define XENT_SEGMENTED 0
#endif
#ifndef XENT_ONE_BLOCK
#define XENT_ONE_BLOCK 0
#endif
#ifndef XENT_EDGES_ONCE
#define XENT_EDGES_ONCE 0
#endif
#ifndef XENT_FINISH_APART
#define XENT_FINISH_APART 0
#endif
#define POLY_EVERY (XENT_POLY ? XENT_POLY : 1)
#include "shared/problem.cuh"

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
#define FULL_MASK 0xffffffffu
/* A word of -inf logits (one fp32, two fp16 or two bf16): what missing vectors read as. */
#define NEG_INF_WORD (XENT_LOGIT == 0 ? 0xff800000u : XENT_LOGIT == 1 ? 0xfc00fc00u : 0xff80ff80u)

#include "shared/checks.cuh"
#if XENT_TILE && XENT_TPR != 1
#error "TILE needs TPR == 1"
#endif
#if XENT_POLY && (XENT_LOGIT == 0 || XENT_TILE)
#error "POLY needs 16-bit logits and TILE == 0"
#endif

#include "shared/loads.cuh"

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

#include "shared/exp2.cuh"

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

#include "shared/team.cuh"

/* The team's merged sums, and its max, in every lane; the barrier after
 * frees warp_part for the next reduction. */
#define MAX_INTO(x, y) ((x) = fmaxf((x), (y)))
#define SHFL_F(x, o) __shfl_xor_sync(FULL_MASK, (x), (o))

__device__ __forceinline__ void team_merge(acc &a) {
    __shared__ acc warp_acc[WARPS];
    TEAM_REDUCE(a, warp_acc, acc_shfl_xor, acc_merge);
    if (XENT_TPR > 32) __syncthreads();
}

__device__ __forceinline__ float team_max(float m) {
    __shared__ float warp_max[WARPS];
    TEAM_REDUCE(m, warp_max, SHFL_F, MAX_INTO);
    if (XENT_TPR > 32) __syncthreads();
    return m;
}

