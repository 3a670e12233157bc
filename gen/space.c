/* gen/space.c — the knob table, constraints, config text and heuristic. */
#include "gen/space.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KNOB(field) offsetof(xent_config, field)

/* One knob a few lines, not a field a line: */
/* clang-format off */
const xent_knob xent_knobs[] = {
    {"VEC", "elements per vector load (VEC * element size in 4, 8, 16 bytes)", KNOB_RENDER,
     4, {1, 2, 4, 8}, KNOB(vec), 0, KNOB_FWD | KNOB_GRAD},
    {"TPR", "threads per row team (<= 32 share a warp, > 32 is the whole block)", KNOB_RENDER,
     10, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, KNOB(tpr), 0, KNOB_FWD | KNOB_GRAD},
    /* 1024 is left out: at 64 registers a thread every variant spilled. */
    {"BLOCK", "threads per block (a multiple of TPR; equal to TPR when TPR > 32)", KNOB_RENDER,
     4, {64, 128, 256, 512}, KNOB(block), 0, KNOB_FWD | KNOB_GRAD},
    {"ITEMS", "vector loads per thread per chunk (registers hold ITEMS*VEC logits)",
     KNOB_RENDER, 6, {1, 2, 4, 8, 16, 32}, KNOB(items), 0, KNOB_FWD | KNOB_GRAD},
    {"PASSES", "1: online max and sum in one read; 2: max, then sum (registers or re-read)",
     KNOB_RENDER, 2, {1, 2}, KNOB(passes), 0, KNOB_FWD},
    {"CACHE", "load hint: 0 plain, 1 read-only no L1 allocation, 2 streaming evict-first",
     KNOB_RENDER, 3, {0, 1, 2}, KNOB(cache), 0, KNOB_FWD | KNOB_GRAD},
    {"TILE", "1: each warp stages 32 rows in shared memory, a thread reduces each (tiny c)",
     KNOB_RENDER, 2, {0, 1}, KNOB(tile), 0, KNOB_FWD},
    {"SPLIT", "teams per row: segments combined by the row's last team (xent_grad: the blocks of a "
     "cluster sharing a row through distributed shared memory)", KNOB_LAUNCH,
     8, {1, 2, 4, 8, 16, 32, 64, 128}, KNOB(split), 0, KNOB_FWD | KNOB_GRAD},
    {"PERSIST", "0: a block a group of rows, or two even rounds of blocks where the groups exceed one round "
     "by less than another; 1: grid of at most the resident blocks, teams loop over rows; 2: the same grid, "
     "rows taken from a counter as teams finish (no uneven last round); 3: as 1, with as few blocks "
     "as give every block the same number of rounds", KNOB_LAUNCH,
     4, {0, 1, 2, 3}, KNOB(persist), 0, KNOB_FWD},
    {"PREFETCH", "1: issue the next chunk's loads before reducing this one (PASSES=1; twice the "
     "chunk's registers, more bytes in flight per warp; xent_grad: also the next row's first chunk)",
     KNOB_RENDER, 2, {0, 1}, KNOB(prefetch), 1, KNOB_GRAD},
    {"POLY", "4, 8: one exponential in that many by a polynomial on the FMA pipe, the rest on the MUFU "
     "pipe, which 16-bit chunks keep busy (xent_fwd: 16-bit logits only)", KNOB_RENDER, 3, {0, 4, 8}, KNOB(poly), 1,
     KNOB_FWD | KNOB_GRAD},
    {"EVICT", "1: L2 priorities for rows read twice: the first read evict-last, the second and the gradient's "
     "stores evict-first", KNOB_RENDER, 2, {0, 1}, KNOB(evict), 1, KNOB_GRAD},
    {"STASH", "1: (fused rows longer than a chunk) the chunks after the first wait in shared memory for "
     "the gradient instead of being read again (TPR == BLOCK, no PREFETCH)", KNOB_RENDER, 2, {0, 1},
     KNOB(stash), 1, KNOB_GRAD},
    {"FLAT", "1: (backward of rows back to back) the n x C gradient as one stream: a block takes a tile of "
     "BLOCK * ITEMS vectors wherever rows start, and the terms of the rows it crosses from shared memory "
     "(TPR == BLOCK)", KNOB_RENDER, 2, {0, 1}, KNOB(flat), 1, KNOB_GRAD},
};
/* clang-format on */
const int xent_nknobs = (int)(sizeof xent_knobs / sizeof xent_knobs[0]);

#define REGS_PER_SM 65536
/* Dynamic shared memory available without opting in. */
#define MAX_TILE_BYTES (48 * 1024)
/* Dynamic shared memory a block may opt in to on sm_90 (227 KB), less room
 * for the template's own (under 1 KB). A GPU with less refuses the launch,
 * and the tuner records the failure. */
#define MAX_STASH_BYTES (226 * 1024)
/* Split rows keep per-row arrivals, partials and results in the workspace
 * (xent_launch_shape): beyond this many rows x segments it grows large.
 * Unsplit rows keep nothing per row, so no row count is refused for them. */
#define MAX_SPLIT_ITEMS (1L << 22)
/* Block sizes the space offers to teams within a warp. */
#define MIN_WARP_TEAM_BLOCK 128
#define MAX_WARP_TEAM_BLOCK 512

int xent_knob_get(const xent_config *cfg, const xent_knob *k) { return *(const int *)((const char *)cfg + k->offset); }

void xent_knob_set(xent_config *cfg, const xent_knob *k, int v) { *(int *)((char *)cfg + k->offset) = v; }

int xent_dtype_size(xent_dtype d) { return d == XENT_F32 ? 4 : 2; }

xent_family xent_problem_family(const xent_problem *p) {
    return p->op != XENT_OP_FORWARD || p->z_loss > 0.0f || p->softcap > 0.0f || p->vocab != 0 ? XENT_FAMILY_GRAD
                                                                                              : XENT_FAMILY_FWD;
}

const char *xent_problem_family_name(const xent_problem *p) {
    static const char *grad[] = {"xent_grad/fwd", "xent_grad/fused", "xent_grad/bwd", "xent_grad/comb",
                                 "xent_grad/resc"};
    if (xent_problem_family(p) == XENT_FAMILY_FWD) return XENT_FAMILY;
    return (unsigned)p->op <= XENT_OP_RESCALE ? grad[p->op] : "xent_grad";
}

static int in_list(const xent_knob *k, int v) {
    for (int i = 0; i < k->nvalues; i++)
        if (k->values[i] == v) return 1;
    return 0;
}

/* Logits a thread may hold as one chunk, leaving registers for addresses and
 * sums (ptxas -v, sm_90: 64 fit in about 100 registers, 32 in 128 at 512
 * threads; 128 took 224 registers, too few warps, and measured slower). */
static int chunk_limit(int block) { return REGS_PER_SM / block >= 255 ? 64 : 32; }

static int refuse(char *why, size_t len, const char *reason) {
    if (why && len) snprintf(why, len, "%s", reason);
    return 0;
}

/* The largest cluster the hardware guarantees without opting in. */
#define MAX_GRAD_SPLIT 8
/* Bytes of a chunk a thread of the grad family may hold in registers: 64
 * words, which a thread holding 128 16-bit logits keeps in 124 registers
 * without spilling. */
#define GRAD_CHUNK_BYTES 256
/* Words of a chunk when two are held (PREFETCH): 2 x 16 words and the row's
 * state stay under the 128 registers a 512-thread block allows. */
#define GRAD_PREFETCH_WORDS 16

/* Logits a training config holds of a row at once: its chunk over the team
 * and the cluster. A row no longer is held in registers between its sums
 * and its gradient; a longer one is taken chunk by chunk. */
static int64_t grad_capacity(const xent_config *cfg) {
    return (int64_t)cfg->tpr * cfg->items * cfg->vec * cfg->split;
}

/* STASH: a block's slice of the row (at most c / VEC vectors, whatever the
 * row's alignment, over SPLIT blocks) past its first chunk. */
static size_t grad_stash_bytes(const xent_config *cfg, const xent_problem *p) {
    long long vecs = p->c / cfg->vec, slice = (vecs + cfg->split - 1) / cfg->split;
    long long past = slice - (long long)cfg->tpr * cfg->items;
    return past > 0 ? (size_t)past * (size_t)(cfg->vec * xent_dtype_size(p->logits)) : 0;
}

/* A knob a family does not use must be at its first value. */
static int family_knobs_only(const xent_config *cfg, int family, const char *name, char *why, size_t len) {
    for (int i = 0; i < xent_nknobs; i++)
        if (!(xent_knobs[i].families & family) && xent_knob_get(cfg, &xent_knobs[i]) != xent_knobs[i].values[0]) {
            if (why && len)
                snprintf(why, len, "the %s family takes %s=%d", name, xent_knobs[i].name, xent_knobs[i].values[0]);
            return 0;
        }
    return 1;
}

static int grad_legal(const xent_config *cfg, xent_dtype d, char *why, size_t len) {
    if (!family_knobs_only(cfg, KNOB_GRAD, "xent_grad", why, len)) return 0;
    int vbytes = cfg->vec * xent_dtype_size(d);
    if (vbytes != 4 && vbytes != 8 && vbytes != 16)
        return refuse(why, len, "VEC * element size must be 4, 8 or 16 bytes");
    if (cfg->block % cfg->tpr || (cfg->tpr > 32 && cfg->block != cfg->tpr))
        return refuse(why, len, "BLOCK must be a multiple of TPR, and equal to it when TPR > 32");
    if (cfg->split > MAX_GRAD_SPLIT) return refuse(why, len, "SPLIT: a cluster has at most 8 blocks");
    if (cfg->split > 1 && cfg->tpr != cfg->block)
        return refuse(why, len, "SPLIT > 1 takes TPR == BLOCK (a cluster of whole-block teams)");
    if (cfg->items * vbytes > GRAD_CHUNK_BYTES)
        return refuse(why, len, "ITEMS * VEC exceeds what a thread holds in registers (256 bytes)");
    if (cfg->prefetch && cfg->items * vbytes > 4 * GRAD_PREFETCH_WORDS)
        return refuse(why, len, "PREFETCH holds two chunks: at most 16 words a chunk");
    if (cfg->stash && (cfg->prefetch || cfg->tpr != cfg->block))
        return refuse(why, len, "STASH takes PREFETCH=0 and TPR == BLOCK");
    if (cfg->flat && (cfg->tpr != cfg->block || cfg->split > 1 || cfg->prefetch || cfg->stash || cfg->evict || cfg->poly))
        return refuse(why, len, "FLAT takes TPR == BLOCK, SPLIT=1, PREFETCH=0, STASH=0, EVICT=0 and POLY=0");
    return 1;
}

/* FLAT: the rows a block's tile may cross, the stream's edge elements
 * included (at most VEC - 1 before the first vector and after the last);
 * their terms sit in shared memory, one entry a thread. */
static int64_t flat_rows(const xent_config *cfg, const xent_problem *p) {
    int64_t rows = (grad_capacity(cfg) + 2 * cfg->vec) / p->c + 2; /* a tile: TPR == BLOCK, SPLIT=1 */
    return rows < p->n ? rows : p->n;
}

static int flat_fits(const xent_config *cfg, const xent_problem *p, char *why, size_t len) {
    if (p->op != XENT_OP_BACKWARD) return refuse(why, len, "FLAT is the backward's");
    if (p->n > 1 && p->row_stride && p->row_stride != p->c)
        return refuse(why, len, "FLAT takes rows back to back (row stride == C)");
    if (p->c < cfg->vec) return refuse(why, len, "FLAT takes rows of at least VEC classes");
    if (flat_rows(cfg, p) > cfg->block) return refuse(why, len, "FLAT: a tile crosses more rows than BLOCK");
    if (p->n > 0x7fffffffLL / p->c * grad_capacity(cfg))
        return refuse(why, len, "FLAT: more tiles than a grid holds");
    return 1;
}

int xent_config_legal_for(const xent_config *cfg, xent_family f, xent_dtype d, char *why, size_t len) {
    for (int i = 0; i < xent_nknobs; i++)
        if (!in_list(&xent_knobs[i], xent_knob_get(cfg, &xent_knobs[i]))) {
            if (why && len) snprintf(why, len, "%s is not one of its legal values", xent_knobs[i].name);
            return 0;
        }
    return f == XENT_FAMILY_GRAD ? grad_legal(cfg, d, why, len) : xent_config_legal(cfg, d, why, len);
}

int xent_config_legal(const xent_config *cfg, xent_dtype d, char *why, size_t len) {
    for (int i = 0; i < xent_nknobs; i++)
        if (!in_list(&xent_knobs[i], xent_knob_get(cfg, &xent_knobs[i]))) {
            if (why && len) snprintf(why, len, "%s is not one of its legal values", xent_knobs[i].name);
            return 0;
        }
    int vbytes = cfg->vec * xent_dtype_size(d);
    if (vbytes != 4 && vbytes != 8 && vbytes != 16)
        return refuse(why, len, "VEC * element size must be 4, 8 or 16 bytes");
    if (cfg->tpr > 32 && cfg->block != cfg->tpr)
        return refuse(why, len, "a team wider than a warp is the whole block (BLOCK == TPR)");
    if (cfg->tpr <= 32 && (cfg->block < MIN_WARP_TEAM_BLOCK || cfg->block > MAX_WARP_TEAM_BLOCK))
        return refuse(why, len, "teams within a warp use blocks of 128 to 512 threads");
    if (cfg->split > 1 && cfg->tpr < 32)
        return refuse(why, len, "SPLIT > 1 takes TPR >= 32 (a warp or a block a team, whose combine is uniform)");
    if (cfg->tile && (cfg->tpr != 1 || cfg->items != 1 || cfg->passes != 2 || cfg->split != 1))
        return refuse(why, len, "TILE=1 takes TPR=1 ITEMS=1 PASSES=2 SPLIT=1");
    if (cfg->tile && cfg->persist == 2)
        return refuse(why, len, "TILE=1 takes PERSIST 0 or 1 (its warps take row groups by position)");
    if (!family_knobs_only(cfg, KNOB_FWD, "xent_fwd", why, len)) return 0;
    /* fp32 chunks leave the MUFU pipe a third busy: nothing to balance */
    if (cfg->poly && (d == XENT_F32 || cfg->tile))
        return refuse(why, len, "POLY takes 16-bit logits and TILE=0 (the chunk sums it splits between pipes)");
    /* 16-bit logits are widened to fp32 as they are used, so count elements. */
    if (cfg->items * cfg->vec > chunk_limit(cfg->block))
        return refuse(why, len, "ITEMS * VEC exceeds what the registers of a thread of this BLOCK hold");
    return 1;
}

static long pow2_ceil(long x) {
    long p = 1;
    while (p < x) p <<= 1;
    return p;
}

static int widest_vec(xent_dtype d) { return 16 / xent_dtype_size(d); }

/* The widest vector under which every row starts at the same alignment. */
static int stride_vec(const xent_problem *p) {
    int v = widest_vec(p->logits);
    int64_t stride = p->row_stride ? p->row_stride : p->c;
    while (v > 1 && stride % v) v /= 2;
    if (v * xent_dtype_size(p->logits) < 4) v = 4 / xent_dtype_size(p->logits);
    return v;
}

/* Whether every row of p starts on a 16-byte boundary (of an aligned tensor). */
static int rows_aligned(const xent_problem *p) { return p->n == 1 || stride_vec(p) == widest_vec(p->logits); }

/* Rows of this many bytes or fewer load vectors of their own alignment. */
#define SHORT_ROW_BYTES 8192

/* The vector a row of p loads: below 256 classes the one its stride keeps
 * aligned; rows of up to SHORT_ROW_BYTES whose starts are 4-byte aligned or
 * better also take their alignment's vector, since scalar edges cost such
 * rows more than narrow loads do (the tuned winners of rows of 99 to 1075
 * classes, fp32 and fp16, took it and ran 6-26% faster than with the widest
 * vectors); longer rows, and rows aligned to less than 4 bytes, the widest. */
static int row_vec(const xent_problem *p) {
    int64_t stride = p->row_stride ? p->row_stride : p->c, esize = xent_dtype_size(p->logits);
    int own = p->c < 256 || (p->c * esize <= SHORT_ROW_BYTES && stride * esize % 4 == 0);
    return own ? stride_vec(p) : widest_vec(p->logits);
}

/* The vectors of a team's segment of a row: the whole row unless split. */
static long seg_vectors(const xent_config *c, const xent_problem *p) {
    long nv = (p->c + c->vec - 1) / c->vec;
    return (nv + c->split - 1) / c->split;
}

/* The ITEMS that hold a lane's share of seg vectors in one chunk. */
static long lane_items(const xent_config *c, long seg) { return pow2_ceil((seg + c->tpr - 1) / c->tpr); }

/* No team wider than seg vectors: a team wider than a warp is its block, and
 * one narrowed from a block to a warp or less takes the smallest block such
 * teams use. */
static void narrow_team(xent_config *cfg, long seg) {
    long widest = pow2_ceil(seg);
    if (cfg->tpr <= widest) return;
    cfg->block = widest > 32 ? (int)widest : cfg->tpr > 32 ? MIN_WARP_TEAM_BLOCK : cfg->block;
    cfg->tpr = (int)widest;
}

/* A team no wider than a segment's vectors, and a chunk no longer than its
 * share (the tuner's pruning in relevant()): a config made for longer rows
 * otherwise leaves lanes idle and loads masked out. Two passes win only over
 * a segment held in one chunk (every shipped PASSES=2 winner holds its
 * segment so, and no winner of several chunks takes them), so a segment that
 * outgrows the chunk takes one pass instead of being read twice (367696x217
 * bf16 with 1048576x100's config: 89.6 us, tuned 57.6). */
static void fit_team(xent_config *cfg, const xent_problem *p) {
    long seg = seg_vectors(cfg, p);
    narrow_team(cfg, seg);
    long fit = lane_items(cfg, seg);
    if (cfg->items > fit) cfg->items = (int)fit;
    if (cfg->passes == 2 && cfg->items < fit) cfg->passes = 1;
}

/* Bytes a lane loads a chunk below which a fitted chunk is not halved: four
 * 16-byte loads in flight a lane. */
#define MIN_LANE_CHUNK_BYTES 64

/* The share of a segment's chunks its vectors use, in hundredths. */
static long chunk_use(long seg, long chunk) { return 100 * seg / (((seg + chunk - 1) / chunk) * chunk); }

/* A segment of a few chunks whose last is mostly empty leaves lanes idle for
 * a whole chunk's round trip: halve the chunk while a quarter of the chunks'
 * loads would be masked out and a lane still loads MIN_LANE_CHUNK_BYTES
 * (5501x16908 f32 on 4096x32000's chunk of 16384 logits, two chunks for
 * 16908: 111 us; its tune's chunks of 4096: 88.5 us). */
static void fit_chunks(xent_config *cfg, const xent_problem *p) {
    long seg = seg_vectors(cfg, p), chunk = (long)cfg->tpr * cfg->items;
    while (seg > chunk && chunk_use(seg, chunk) < 75 &&
           cfg->items * cfg->vec * xent_dtype_size(p->logits) > MIN_LANE_CHUNK_BYTES) {
        cfg->items /= 2;
        chunk /= 2;
    }
}

static const xent_knob *knob_named(const char *name, size_t n);

/* Every tuned PERSIST=2 winner split its rows; unsplit, a config keeps the
 * static grid (PERSIST=2 sums of whole rows are not bitwise reproducible). */
static void set_split(xent_config *cfg, int split) {
    cfg->split = split;
    if (cfg->persist == 2 && split == 1) cfg->persist = 1;
}

/* Segments a row for p's rows from a split made for n_from: about as many
 * teams as the entry ran (rows x segments), since splitting is there to fill
 * the GPU when rows are few; none where p's rows alone are as many. */
static void fit_split(xent_config *cfg, int64_t n_from, const xent_problem *p) {
    if (cfg->split == 1 || n_from <= 0) return;
    const xent_knob *k = knob_named("SPLIT", 5);
    const int most = k->values[k->nvalues - 1];
    int64_t teams = n_from * cfg->split;
    int split = 1;
    while (split < most && 2 * split * p->n <= teams) split *= 2;
    set_split(cfg, split);
}

void xent_config_fit_rows(xent_config *cfg, int64_t n_from, const xent_problem *p) {
    if (xent_problem_family(p) != XENT_FAMILY_FWD || cfg->tile) return;
    xent_config fitted = *cfg;
    fit_split(&fitted, n_from, p);
    int v = row_vec(p);
    if (v < cfg->vec) { /* as many elements a chunk, in narrower loads */
        long items = (long)cfg->items * cfg->vec / v, most = chunk_limit(cfg->block) / v;
        fitted.items = (int)(items > 32 ? 32 : items > most ? most : items);
        fitted.vec = v;
    }
    fit_team(&fitted, p);
    fit_chunks(&fitted, p);
    if (xent_config_fits(&fitted, p, NULL, 0)) *cfg = fitted;
}

/* Splitting pays only when rows are too few to fill the GPU. */
static int split_relevant(const xent_problem *p, int sm_count, const xent_config *c) {
    if (c->split == 1) return 1;
    long seg = seg_vectors(c, p);
    return p->n < 2L * sm_count && p->n * c->split <= 16L * sm_count && seg >= c->tpr * 4L && c->tpr >= 32;
}

/* Prune what cannot win for this problem: idle lanes, needless registers,
 * splits of rows that already fill the GPU. */
static int relevant(const xent_config *c, const xent_problem *p, int sm_count) {
    if (!xent_config_fits(c, p, NULL, 0)) return 0;
    int vmax = widest_vec(p->logits);
    if (c->vec != vmax && c->vec != stride_vec(p)) return 0;
    if (c->tile) return p->c * xent_dtype_size(p->logits) <= 256;
    if (!split_relevant(p, sm_count, c)) return 0;
    long seg = seg_vectors(c, p);
    if (c->tpr > 1 && c->tpr > pow2_ceil(seg)) return 0;
    if (seg > (long)c->tpr * 256 && c->tpr < 512)
        return 0; /* too many vectors per thread, unless no wider team exists */
    long fit = lane_items(c, seg);
    if (c->items > fit) return 0;
    if (c->items != fit && c->items != 4 && c->items != 8 && c->items != 16) return 0;
    if (c->passes == 2 && c->items != fit && c->tpr < 32) return 0;
    /* POLY balances the pipes of long rows' chunks; short rows are paced by
     * instruction issue, which its polynomial only adds to */
    if (c->poly && (p->c < 512 || c->items * c->vec < 2 * c->poly)) return 0;
    return 1;
}

/* xent_grad: the widest vectors (rows of any alignment take scalar edges);
 * a row held in registers by the fewest threads that hold it (hold), or,
 * past what a cluster holds, chunks read twice; clusters only for long rows. */
static int grad_relevant(const xent_config *c, const xent_problem *p) {
    /* short rows also take the vector their stride keeps aligned: with the
     * widest, a team of one thread would hold up to 2 VEC - 2 scalar edges */
    if (!xent_config_fits(c, p, NULL, 0)) return 0;
    if (c->vec != widest_vec(p->logits) && (p->c > 256 || c->vec != stride_vec(p))) return 0;
    long per_thread = (long)c->items * c->vec;
    long cap = (long)grad_capacity(c);
    long most = 512L * (GRAD_CHUNK_BYTES / xent_dtype_size(p->logits)) * MAX_GRAD_SPLIT;
    if (per_thread < 8) return 0;
    if (c->tpr <= 32 && c->block != 128 && c->block != 256) return 0;
    if (c->stash && grad_stash_bytes(c, p) == 0) return 0; /* the same kernel as STASH=0 */
    /* POLY gains only where a fused fp32 row is held in registers; 16-bit
     * rows and rows read twice ran slower with it, the backward no faster */
    if (c->poly && (p->logits != XENT_F32 || p->op != XENT_OP_FUSED || cap < p->c || per_thread < 2 * c->poly))
        return 0;
    /* a flat tile: one-shot blocks of 4 or 8 loads a thread, as the streaming
     * read, for rows that start off a 16-byte boundary (rows that start on
     * one ran 12-40% slower flat: 32768x4096 fp32 and bf16, 8192x128256 bf16) */
    if (c->flat) return !rows_aligned(p) && c->tpr >= 128 && (c->items == 4 || c->items == 8);
    if (p->op == XENT_OP_BACKWARD) /* one streaming pass: nothing to hold */
        return c->split == 1 && (c->tpr >= 32 ? cap <= 2 * pow2_ceil(p->c) : cap >= p->c && cap < 4 * p->c);
    /* long rows: also one block a row, read twice (the second read from L2) */
    if (p->c > 16384 && c->split == 1 && c->tpr >= 256 && cap < p->c) return 1;
    if (p->c <= most) return cap >= p->c && cap < 4 * p->c && (c->split == 1 || c->tpr >= 256);
    return c->tpr == 512 && c->split == MAX_GRAD_SPLIT;
}

static size_t enumerate_from(int knob, xent_config *cur, xent_dtype d, const xent_problem *rel, int sm_count,
                             xent_config *out, size_t cap, size_t count) {
    const xent_family fam = rel ? xent_problem_family(rel) : XENT_FAMILY_FWD;
    if (knob == xent_nknobs) {
        if (!xent_config_legal_for(cur, fam, d, NULL, 0)) return count;
        if (rel && !(fam == XENT_FAMILY_GRAD ? grad_relevant(cur, rel) : relevant(cur, rel, sm_count))) return count;
        if (out && count < cap) out[count] = *cur;
        return count + 1;
    }
    const xent_knob *k = &xent_knobs[knob];
    for (int i = 0; i < k->nvalues; i++) {
        xent_knob_set(cur, k, k->values[i]);
        if (!rel && k->stage == KNOB_LAUNCH && i > 0) break; /* the full space renders each once */
        if (!(k->families & (fam == XENT_FAMILY_GRAD ? KNOB_GRAD : KNOB_FWD)) && i > 0) break;
        count = enumerate_from(knob + 1, cur, d, rel, sm_count, out, cap, count);
    }
    return count;
}

/* A non-persistent launch of between one and two rounds of blocks ran its
 * last blocks after the rest: the two even rounds of PERSIST=3 were 2-19%
 * faster on 12 such problems (13183x2505 f16 31.4 -> 27.7 us), the same
 * where the groups fit one round, and 1.4-1.7% slower over many rounds,
 * which keep a block a group. */
long long xent_persistent_grid(long long groups, long long resident, int persist) {
    if (groups <= resident) return groups;
    if (!persist && groups >= 2 * resident) return groups;
    if (persist == 1 || persist == 2) return resident;
    long long rounds = (groups + resident - 1) / resident;
    return (groups + rounds - 1) / rounds;
}

size_t xent_space_enumerate(xent_dtype d, const xent_problem *relevant_to, int sm_count, xent_config *out, size_t cap) {
    xent_config cur;
    memset(&cur, 0, sizeof cur);
    return enumerate_from(0, &cur, d, relevant_to, sm_count, out, cap, 0);
}

int xent_config_format(const xent_config *cfg, char *buf, size_t len) {
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < xent_nknobs; i++) {
        int w = snprintf(buf + used, len > used ? len - used : 0, "%s%s=%d", i ? " " : "", xent_knobs[i].name,
                         xent_knob_get(cfg, &xent_knobs[i]));
        if (w < 0 || used + (size_t)w >= len) return XENT_EINVAL;
        used += (size_t)w;
    }
    return XENT_OK;
}

static const xent_knob *knob_named(const char *name, size_t n) {
    for (int i = 0; i < xent_nknobs; i++)
        if (strlen(xent_knobs[i].name) == n && !strncmp(xent_knobs[i].name, name, n)) return &xent_knobs[i];
    return NULL;
}

/* Knobs retired from the space (no tuned winner used them): their text in
 * older caches still parses at the value every config then had, 0. */
static const char *const retired_knobs[] = {"ASYNC"};

/* Length of "NAME=0" at s when NAME is a retired knob, 0 when s is not one;
 * -1 when it is one at a value no config may have now. */
static int retired_knob(const char *s, size_t name_len, char *why, size_t len) {
    for (size_t i = 0; i < sizeof retired_knobs / sizeof retired_knobs[0]; i++) {
        if (strlen(retired_knobs[i]) != name_len || strncmp(s, retired_knobs[i], name_len)) continue;
        const char *v = s + name_len + 1;
        if (v[0] == '0' && (!v[1] || v[1] == ' ' || v[1] == '\t' || v[1] == ',')) return (int)name_len + 2;
        if (why && len) snprintf(why, len, "%s was retired: only %s=0 is read", retired_knobs[i], retired_knobs[i]);
        return -1;
    }
    return 0;
}

int xent_config_parse(const char *text, xent_config *cfg, char *why, size_t len) {
    unsigned seen = 0;
    const char *s = text;
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < xent_nknobs; i++)
        if (xent_knobs[i].optional) xent_knob_set(cfg, &xent_knobs[i], xent_knobs[i].values[0]);
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (!*s) break;
        const char *eq = strchr(s, '=');
        if (!eq) return refuse(why, len, "expected NAME=VALUE"), XENT_EINVAL;
        const xent_knob *k = knob_named(s, (size_t)(eq - s));
        int retired = k ? 0 : retired_knob(s, (size_t)(eq - s), why, len);
        if (retired < 0) return XENT_EINVAL;
        if (retired) {
            s += retired;
            continue;
        }
        if (!k) {
            if (why && len) snprintf(why, len, "unknown knob '%.*s'", (int)(eq - s), s);
            return XENT_EINVAL;
        }
        char *end;
        errno = 0;
        long v = strtol(eq + 1, &end, 10);
        /* range first: cast to int, 4294967297 would read as 1, a legal VEC */
        int separated = !*end || *end == ' ' || *end == '\t' || *end == ',';
        if (end == eq + 1 || errno || v < INT_MIN || v > INT_MAX || !separated || !in_list(k, (int)v)) {
            if (why && len)
                snprintf(why, len, "%s: illegal value '%.*s'", k->name, (int)strcspn(eq + 1, " \t,"), eq + 1);
            return XENT_EINVAL;
        }
        unsigned bit = 1u << (k - xent_knobs);
        if (seen & bit) {
            if (why && len) snprintf(why, len, "%s given twice", k->name);
            return XENT_EINVAL;
        }
        seen |= bit;
        xent_knob_set(cfg, k, (int)v);
        s = end;
    }
    for (int i = 0; i < xent_nknobs; i++)
        if (!xent_knobs[i].optional && !(seen & (1u << i))) {
            if (why && len) snprintf(why, len, "every knob must be given (%s is missing)", xent_knobs[i].name);
            return XENT_EINVAL;
        }
    return XENT_OK;
}

/* The template's shared memory. STASH (grad_stash_bytes). TILE (tile_region): a region
 * per warp of 32 rows plus VEC elements of room for the misalignment of the
 * rows' span, each region rounded up to start 16-byte aligned. */
size_t xent_config_smem(const xent_config *cfg, const xent_problem *p) {
    if (cfg->stash) return grad_stash_bytes(cfg, p);
    if (!cfg->tile) return 0;
    int64_t stride = p->row_stride ? p->row_stride : p->c;
    size_t region = ((size_t)(32 * stride + cfg->vec) * (size_t)xent_dtype_size(p->logits) + 15) & ~(size_t)15;
    return (size_t)(cfg->block / 32) * region;
}

int xent_config_fits(const xent_config *cfg, const xent_problem *p, char *why, size_t len) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) {
        if (!xent_config_legal_for(cfg, XENT_FAMILY_GRAD, p->logits, why, len)) return 0;
        if (cfg->stash && p->op != XENT_OP_FUSED) return refuse(why, len, "STASH is the fused kernel's");
        /* no lower bound: a held row stashes nothing, so a nearest entry's STASH=1 still fits it */
        if (cfg->stash && grad_stash_bytes(cfg, p) > MAX_STASH_BYTES)
            return refuse(why, len, "STASH: the row past its first chunk exceeds the shared memory of a block");
        return !cfg->flat || flat_fits(cfg, p, why, len);
    }
    if (!xent_config_legal(cfg, p->logits, why, len)) return 0;
    int64_t stride = p->row_stride ? p->row_stride : p->c;
    /* the stride test first: it keeps xent_config_smem from overflowing */
    if (cfg->tile && (stride > MAX_TILE_BYTES || xent_config_smem(cfg, p) > MAX_TILE_BYTES))
        return refuse(why, len, "TILE: 32 rows of this stride per warp exceed 48 KB of shared memory");
    /* divided, not multiplied: the problem may not have been checked yet */
    if (cfg->split > 1 && p->n > MAX_SPLIT_ITEMS / cfg->split)
        return refuse(why, len, "SPLIT: rows x segments exceed the workspace limit");
    /* Under PERSIST=2 which rows a block sums varies from run to run; split rows
     * are summed in row order whatever the schedule, unsplit ones are not. */
    if (cfg->persist == 2 && cfg->split == 1 && p->reduction != XENT_REDUCE_NONE)
        return refuse(why, len, "PERSIST=2 with a sum or mean needs SPLIT > 1 (bitwise reproducible sums)");
    return 1;
}

/* xent_grad: 16 elements a thread, the fewest threads that hold the row,
 * in teams of up to 512; past that the row is read twice by 512 threads of
 * 256 bytes a chunk (the backward, one read, 128). A thread holds 32 fp32
 * logits in teams of at least 64, or up to 128 16-bit ones in teams of at
 * least a warp (the backward, which holds nothing across a reduction, 32 of
 * either). The tuned fused winners on the H200: at 32768x4096 bf16 a warp
 * of 128 logits a lane (150 us, against 170 for 128 threads of 32), fp32
 * there 32 a lane (285 us, 291 at 64); read twice, 16384x50257 fp32 and
 * 8192x128256 bf16 at 256 bytes a lane, 1.09x and 1.22x faster than 128
 * and 64; read twice, the 16-bit rows' chunks past the first wait in shared
 * memory (STASH: 8192x128256 bf16 1111 us against 1135 with EVICT, 8192x50257
 * 465 against 468), fp32's not (16384x50257: 1791 against 1780). */
static void grad_heuristic(const xent_problem *p, xent_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < xent_nknobs; i++) xent_knob_set(cfg, &xent_knobs[i], xent_knobs[i].values[0]);
    long threads = (p->c + 15) / 16;
    if (threads <= 32) { /* 16 elements a lane, in vectors the row stride keeps aligned */
        cfg->vec = p->c > 256 ? widest_vec(p->logits) : stride_vec(p);
        cfg->items = 16 / cfg->vec;
        cfg->tpr = (int)pow2_ceil(threads);
        cfg->block = 128;
        return;
    }
    const int bwd = p->op == XENT_OP_BACKWARD, wide = p->logits == XENT_F32 || bwd;
    const long per = wide ? 32 : GRAD_CHUNK_BYTES / 2, least = wide ? 64 : 32;
    cfg->vec = widest_vec(p->logits);
    threads = (p->c + per - 1) / per;
    cfg->tpr = (int)(threads <= least ? least : threads >= 512 ? 512 : pow2_ceil(threads));
    cfg->block = cfg->tpr < 64 ? 128 : cfg->tpr;
    const long most = (bwd ? GRAD_CHUNK_BYTES / 2 : GRAD_CHUNK_BYTES) / (cfg->vec * xent_dtype_size(p->logits));
    const long items = pow2_ceil((p->c + (long)cfg->tpr * cfg->vec - 1) / ((long)cfg->tpr * cfg->vec));
    cfg->items = (int)(items < most ? items : most); /* the fewest that hold the row */
    /* 16-bit rows past a chunk keep the rest in shared memory where it fits */
    cfg->stash = p->logits != XENT_F32 && xent_config_reads_twice(cfg, p);
    if (cfg->stash && !xent_config_fits(cfg, p, NULL, 0)) cfg->stash = 0;
    /* A 512-thread 16-bit block holds the SM's registers alone; 256 threads
     * whose stash leaves room for a second block overlap one block's
     * reductions with the other's loads (8192x50257 bf16: 465 us, against
     * 530 held by 512) */
    if (!wide && cfg->tpr == 512) {
        xent_config half = *cfg;
        half.tpr = half.block = 256, half.stash = 1, half.evict = 0;
        if (xent_config_fits(&half, p, NULL, 0) && 2 * xent_config_smem(&half, p) <= MAX_STASH_BYTES) *cfg = half;
    }
    cfg->evict = xent_config_reads_twice(cfg, p);
    /* the backward of fp32 rows that start off a 16-byte boundary streams
     * them flat: a team a row takes scalar edges and a short last chunk
     * (16384x50257: 1654 us flat by 128 threads of 8 loads, against 1720 a
     * row by 512 threads; 1840 by 256 threads of streaming loads) */
    if (bwd && p->logits == XENT_F32 && !rows_aligned(p)) {
        xent_config flat = *cfg;
        flat.flat = 1, flat.tpr = flat.block = 128, flat.items = 8, flat.cache = 0, flat.stash = 0, flat.evict = 0;
        if (xent_config_fits(&flat, p, NULL, 0)) *cfg = flat;
    }
    /* a held fused fp32 row takes one exponential in eight by the polynomial
     * (32768x4096: 282.5 us against 285.3, and 290.9 against 294.2 at 64
     * threads a row); 16-bit and re-read rows were slower with it */
    cfg->poly =
        p->logits == XENT_F32 && p->op == XENT_OP_FUSED && grad_capacity(cfg) >= p->c && cfg->items * cfg->vec >= 32
            ? 8
            : 0;
}

int xent_config_carries(const xent_config *cfg, int64_t c_from, const xent_problem *p) {
    if (xent_problem_family(p) != XENT_FAMILY_GRAD || cfg->flat) return 1; /* a flat tile holds no row */
    const int64_t cap = grad_capacity(cfg);
    const int held_there = cap >= c_from, held_here = cap >= p->c;
    return held_there == held_here && (!held_here || cap < 4 * p->c);
}

/* A fused row read twice keeps its first read in L2 for the second (EVICT:
 * 5-8% faster at 16384x50257 fp32 and 8192x128256 bf16; held rows and the
 * backward's one read were slower with it). */
int xent_config_reads_twice(const xent_config *cfg, const xent_problem *p) {
    return p->op == XENT_OP_FUSED && !cfg->stash && grad_capacity(cfg) < p->c;
}

/* The rule the table falls back to where its cell does not fit the problem
 * (a tile of a long stride): rows that fit a warp's registers are held there
 * (two passes, no re-read); longer rows stream through a whole block; few
 * rows are split. Legal for every problem. */
static void rule_heuristic(const xent_problem *p, int sm_count, xent_config *cfg) {
    cfg->vec = row_vec(p);
    cfg->cache = 0;
    /* TILE is the tuner's to pick: staged by whole blocks it ran 28.9 us at 1048576x10,
     * a thread per row 23.3; staged per warp it is not measured yet */
    cfg->tile = 0;
    cfg->persist = 1;
    cfg->split = 1;
    cfg->prefetch = 0;
    cfg->poly = 0;
    long nv = (p->c + cfg->vec - 1) / cfg->vec;
    int max_items = chunk_limit(128) / cfg->vec;
    if (nv <= 2L * 32 * max_items) { /* a warp per row, one or two chunks */
        long tpr = pow2_ceil((nv + 7) / 8);
        cfg->tpr = (int)(tpr > 32 ? 32 : tpr);
        long fit = pow2_ceil((nv + cfg->tpr - 1) / cfg->tpr);
        cfg->items = (int)(fit > max_items ? max_items : fit);
        cfg->block = 128;
        cfg->passes = fit > max_items ? 1 : 2;
        return;
    }
    /* Long rows, as the H200's tunes chose: many rows take a 256-thread
     * team per row (16384x50257: 750 us against 1043 with 512 threads); few
     * rows take 512 threads and only as many segments as fill the SMs once
     * (64x262144: 2 segments 23.5 us, 8 segments 42.2 us). */
    cfg->passes = 1;
    if (p->n >= 2L * sm_count) {
        cfg->tpr = cfg->block = 256;
        cfg->items = 4;
        return;
    }
    cfg->tpr = cfg->block = 512;
    cfg->items = chunk_limit(512) / cfg->vec;
    while (cfg->split < 128 && p->n <= sm_count / (cfg->split * 2) && nv / (cfg->split * 2) >= 4L * cfg->tpr)
        cfg->split *= 2;
}

/* The heuristic is a model of the shipped tunes: a cell per element size,
 * row-length band and row-count band holds one tuned winner's knobs
 * (docs/cache.md, "How the heuristic is derived"). Row-count bands are
 * relative to the SM count, so a GPU with more or fewer SMs moves its bands
 * with them; launch grids come from the device at plan build as for any
 * config. */
enum heur_rows { HEUR_FEW, HEUR_MID, HEUR_MANY };

typedef struct heur_cell {
    int esize;  /* bytes of a logit */
    long c_max; /* the band's longest row (0: no bound); cells ascend within a size and row band */
    int rows;   /* enum heur_rows */
    int tpr, block;
    int chunk; /* bytes a thread loads per chunk (ITEMS x VEC x element size) */
    int passes, cache, tile, persist, poly;
} heur_cell;

/* Generated text, compared with the generator's output: */
/* clang-format off */
/* heuristic-table: generated by tools/heuristic-table.py from tunecache/h200.sql; do not edit by hand */
#define HEUR_SPLIT_MIN_ELEMS 512
#define HEUR_SPLIT_THREADS_PER_SM 497
#define HEUR_MID_ROWS_PER_SM 32
static const heur_cell heur_cells[] = {
    /* bytes, c up to (0: any), rows, TPR, BLOCK, CHUNK, PASSES, CACHE, TILE, PERSIST, POLY; the entry it came from */
    {4, 4, HEUR_FEW, 1, 128, 4, 2, 0, 1, 1, 0}, /* 1x2 f32, measured */
    {4, 4, HEUR_MID, 1, 128, 4, 2, 0, 1, 0, 0}, /* 1024x2 f32, measured */
    {4, 4, HEUR_MANY, 1, 128, 4, 2, 1, 1, 1, 0}, /* 1048576x2 f32, measured */
    {4, 31, HEUR_FEW, 1, 128, 4, 2, 0, 1, 1, 0}, /* 1x10 f32, measured */
    {4, 31, HEUR_MID, 1, 128, 32, 1, 2, 0, 0, 0}, /* 1024x10 f32, measured */
    {4, 31, HEUR_MANY, 1, 512, 64, 1, 2, 0, 3, 0}, /* 1048576x10 f32, measured */
    {4, 316, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 f32, measured */
    {4, 316, HEUR_MID, 8, 128, 64, 1, 0, 0, 1, 0}, /* 1024x100 f32, measured */
    {4, 316, HEUR_MANY, 4, 128, 128, 2, 0, 0, 1, 0}, /* 1048576x100 f32, measured */
    {4, 2023, HEUR_FEW, 128, 128, 32, 1, 0, 0, 1, 0}, /* 1x1000 f32, measured */
    {4, 2023, HEUR_MID, 32, 128, 128, 1, 0, 0, 1, 0}, /* 256x1000 f32, measured */
    {4, 2023, HEUR_MANY, 16, 128, 128, 1, 0, 0, 1, 0}, /* 262144x1000 f32, measured */
    {4, 11448, HEUR_FEW, 128, 128, 128, 1, 1, 0, 1, 0}, /* 64x4096 f32, measured */
    {4, 11448, HEUR_MID, 32, 128, 128, 1, 1, 0, 0, 0}, /* 1024x4096 f32, measured */
    {4, 11448, HEUR_MANY, 32, 128, 128, 1, 0, 0, 1, 0}, /* 65536x4096 f32, measured */
    {4, 40102, HEUR_FEW, 256, 256, 128, 2, 0, 0, 1, 0}, /* 64x32000 f32, measured */
    {4, 40102, HEUR_MID, 256, 256, 256, 1, 1, 0, 3, 0}, /* 4096x32000 f32, measured */
    {4, 40102, HEUR_MANY, 256, 256, 256, 1, 0, 0, 1, 0}, /* 8192x32000 f32, measured */
    {4, 80285, HEUR_FEW, 128, 128, 128, 2, 0, 0, 1, 0}, /* 8x50257 f32, measured */
    {4, 80285, HEUR_MID, 128, 128, 64, 1, 1, 0, 1, 0}, /* 4096x50257 f32, measured */
    {4, 80285, HEUR_MANY, 128, 128, 128, 1, 1, 0, 3, 0}, /* 16384x50257 f32, measured */
    {4, 183361, HEUR_FEW, 256, 256, 128, 1, 2, 0, 0, 0}, /* 64x128256 f32, measured */
    {4, 183361, HEUR_MID, 128, 128, 64, 1, 2, 0, 1, 0}, /* 2048x128256 f32, measured */
    {4, 183361, HEUR_MANY, 256, 256, 256, 1, 0, 0, 1, 0}, /* 8192x128256 f32, measured */
    {4, 0, HEUR_FEW, 256, 256, 128, 1, 1, 0, 0, 0}, /* 64x262144 f32, measured */
    {4, 0, HEUR_MID, 256, 256, 64, 1, 0, 0, 1, 0}, /* 2048x262144 f32, measured */
    {4, 0, HEUR_MANY, 256, 256, 256, 1, 0, 0, 1, 0}, /* 8192x128256 f32, nearest band */
    {2, 4, HEUR_FEW, 1, 128, 4, 1, 0, 0, 1, 0}, /* 1x2 bf16, measured */
    {2, 4, HEUR_MID, 1, 128, 4, 1, 1, 0, 1, 0}, /* 1024x2 bf16, measured */
    {2, 4, HEUR_MANY, 1, 512, 4, 2, 2, 0, 3, 0}, /* 1048576x2 bf16, measured */
    {2, 31, HEUR_FEW, 1, 128, 32, 1, 0, 0, 1, 0}, /* 1x10 bf16, measured */
    {2, 31, HEUR_MID, 8, 128, 4, 2, 0, 0, 0, 0}, /* 1024x10 bf16, measured */
    {2, 31, HEUR_MANY, 1, 512, 32, 2, 0, 0, 3, 0}, /* 1048576x10 bf16, measured */
    {2, 316, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 bf16, measured */
    {2, 316, HEUR_MID, 8, 128, 32, 1, 0, 0, 1, 0}, /* 1024x100 bf16, measured */
    {2, 316, HEUR_MANY, 2, 128, 128, 2, 0, 0, 1, 0}, /* 1048576x100 bf16, measured */
    {2, 2023, HEUR_FEW, 128, 128, 16, 1, 0, 0, 1, 0}, /* 1x1000 bf16, measured */
    {2, 2023, HEUR_MID, 32, 128, 64, 1, 0, 0, 1, 0}, /* 256x1000 bf16, measured */
    {2, 2023, HEUR_MANY, 8, 128, 128, 1, 0, 0, 1, 0}, /* 262144x1000 bf16, measured */
    {2, 11448, HEUR_FEW, 128, 128, 64, 2, 0, 0, 1, 0}, /* 64x4096 bf16, measured */
    {2, 11448, HEUR_MID, 64, 64, 64, 1, 0, 0, 1, 0}, /* 1024x4096 bf16, measured */
    {2, 11448, HEUR_MANY, 8, 256, 128, 1, 2, 0, 1, 0}, /* 65536x4096 bf16, measured */
    {2, 40102, HEUR_FEW, 256, 256, 64, 1, 2, 0, 1, 8}, /* 64x32000 bf16, measured */
    {2, 40102, HEUR_MID, 128, 128, 128, 1, 1, 0, 1, 8}, /* 4096x32000 bf16, measured */
    {2, 40102, HEUR_MANY, 128, 128, 128, 1, 0, 0, 1, 0}, /* 8192x32000 bf16, measured */
    {2, 80285, HEUR_FEW, 128, 128, 64, 2, 0, 0, 1, 0}, /* 8x50257 bf16, measured */
    {2, 80285, HEUR_MID, 128, 128, 128, 1, 1, 0, 1, 8}, /* 4096x50257 bf16, measured */
    {2, 80285, HEUR_MANY, 128, 128, 128, 1, 1, 0, 3, 0}, /* 16384x50257 bf16, measured */
    {2, 183361, HEUR_FEW, 32, 256, 128, 1, 2, 0, 1, 8}, /* 64x128256 bf16, measured */
    {2, 183361, HEUR_MID, 256, 256, 128, 1, 2, 0, 1, 0}, /* 2048x128256 bf16, measured */
    {2, 183361, HEUR_MANY, 128, 128, 128, 1, 1, 0, 0, 0}, /* 8192x128256 bf16, measured */
    {2, 0, HEUR_FEW, 256, 256, 64, 1, 0, 0, 1, 0}, /* 16x262144 bf16, measured */
    {2, 0, HEUR_MID, 256, 256, 128, 1, 0, 0, 1, 0}, /* 2048x262144 bf16, measured */
    {2, 0, HEUR_MANY, 128, 128, 128, 1, 1, 0, 0, 0}, /* 8192x128256 bf16, nearest band */
};
/* heuristic-table: end */
/* clang-format on */

static enum heur_rows heur_rows_of(int64_t n, int sm_count) {
    if (n < sm_count) return HEUR_FEW;
    return n < (int64_t)HEUR_MID_ROWS_PER_SM * sm_count ? HEUR_MID : HEUR_MANY;
}

static const heur_cell *heur_find(const xent_problem *p, int sm_count) {
    int esize = xent_dtype_size(p->logits);
    enum heur_rows rows = heur_rows_of(p->n, sm_count);
    for (size_t i = 0; i < sizeof heur_cells / sizeof heur_cells[0]; i++) {
        const heur_cell *h = &heur_cells[i];
        if (h->esize == esize && h->rows == (int)rows && (!h->c_max || p->c <= h->c_max)) return h;
    }
    return NULL;
}

static long pow2_floor(long x) {
    long p = 1;
    while (2 * p <= x) p <<= 1;
    return p;
}

/* A cell's chunk bytes as loads of this VEC, within a thread's registers. */
static int heur_items(const heur_cell *h, const xent_config *cfg, xent_dtype d) {
    if (cfg->tile) return 1;
    long items = pow2_floor(h->chunk / (cfg->vec * xent_dtype_size(d)));
    if (items > 32) items = 32;
    while (items > 1 && items * cfg->vec > chunk_limit(cfg->block)) items /= 2;
    return (int)items;
}

/* Few rows are split into segments of at least HEUR_SPLIT_MIN_ELEMS, with at
 * most HEUR_SPLIT_THREADS_PER_SM of the teams' threads per SM in all: the
 * extremes of the tuned winners that split (elements: fp32 and bf16 winners
 * split alike; threads: winners of warp teams split finer than block teams). */
static int heur_split(const xent_problem *p, int sm_count, const xent_config *cfg) {
    if (cfg->tile || cfg->tpr < 32 || heur_rows_of(p->n, sm_count) != HEUR_FEW) return 1;
    int64_t threads = (int64_t)HEUR_SPLIT_THREADS_PER_SM * sm_count;
    int split = 1;
    while (split < 128 && p->c / (2 * split) >= HEUR_SPLIT_MIN_ELEMS && p->n * 2 * split * cfg->tpr <= threads)
        split *= 2;
    return split;
}

/* The cell's config for p; 0 when p has no cell. */
static int table_heuristic(const xent_problem *p, int sm_count, xent_config *cfg) {
    const heur_cell *h = heur_find(p, sm_count);
    if (!h) return 0;
    memset(cfg, 0, sizeof *cfg);
    cfg->vec = row_vec(p);
    cfg->passes = h->passes;
    cfg->cache = h->cache;
    cfg->tile = h->tile;
    cfg->persist = h->persist;
    cfg->poly = p->logits == XENT_F32 ? 0 : h->poly;
    /* no team wider than the row's vectors: a cell spans rows down to the band's shortest */
    cfg->tpr = h->tpr;
    cfg->block = h->block;
    narrow_team(cfg, (p->c + cfg->vec - 1) / cfg->vec);
    cfg->items = heur_items(h, cfg, p->logits);
    set_split(cfg, heur_split(p, sm_count, cfg));
    fit_chunks(cfg, p);
    return 1;
}

/* The table's cell, or the rule where the cell does not fit the problem. */
void xent_config_heuristic(const xent_problem *p, int sm_count, xent_config *cfg) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) {
        grad_heuristic(p, cfg);
        return;
    }
    if (table_heuristic(p, sm_count, cfg) && xent_config_fits(cfg, p, NULL, 0)) return;
    rule_heuristic(p, sm_count, cfg);
}
