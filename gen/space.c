/* gen/space.c — the knob table, constraints, the space's enumeration and the config text. */
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
    /* no 2 (rows taken from a counter): it won no tune; 3 keeps the number caches hold */
    {"PERSIST", "0: a block a group of rows, or two even rounds of blocks where the groups exceed one round "
     "by less than another; 1: grid of at most the resident blocks, teams loop over rows; 3: as 1, with as "
     "few blocks as give every block the same number of rounds", KNOB_LAUNCH,
     3, {0, 1, 3}, KNOB(persist), 0, KNOB_FWD},
    {"PREFETCH", "1: issue the next chunk's loads before reducing this one (twice the chunk's registers; "
     "also the next row's first chunk); 2: (fused, backward) the next row's first chunk loaded into the "
     "registers the row's last gradient chunk frees, item by item", KNOB_RENDER, 3, {0, 1, 2}, KNOB(prefetch), 1,
     KNOB_GRAD},
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
/* Split rows keep per-row arrivals, partials and results in the workspace
 * (xent_launch_shape): beyond this many rows x segments it grows large.
 * Unsplit rows keep nothing per row, so no row count is refused for them. */
#define MAX_SPLIT_ITEMS (1L << 22)

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
int xent_chunk_limit(int block) { return REGS_PER_SM / block >= 255 ? 64 : 32; }

static int refuse(char *why, size_t len, const char *reason) {
    if (why && len) snprintf(why, len, "%s", reason);
    return 0;
}

/* Words of a chunk when two are held (PREFETCH): 2 x 16 words and the row's
 * state stay under the 128 registers a 512-thread block allows. */
#define GRAD_PREFETCH_WORDS 16

/* Logits a training config holds of a row at once: its chunk over the team
 * and the cluster. A row no longer is held in registers between its sums
 * and its gradient; a longer one is taken chunk by chunk. */
int64_t xent_grad_capacity(const xent_config *cfg) { return (int64_t)cfg->tpr * cfg->items * cfg->vec * cfg->split; }

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
    if (cfg->prefetch == 1 && cfg->items * vbytes > 4 * GRAD_PREFETCH_WORDS)
        return refuse(why, len, "PREFETCH=1 holds two chunks: at most 16 words a chunk");
    if (cfg->stash && (cfg->prefetch == 1 || cfg->tpr != cfg->block))
        return refuse(why, len, "STASH takes PREFETCH=0 or 2 and TPR == BLOCK");
    if (cfg->flat &&
        (cfg->tpr != cfg->block || cfg->split > 1 || cfg->prefetch || cfg->stash || cfg->evict || cfg->poly))
        return refuse(why, len, "FLAT takes TPR == BLOCK, SPLIT=1, PREFETCH=0, STASH=0, EVICT=0 and POLY=0");
    return 1;
}

/* FLAT: the rows a block's tile may cross, the stream's edge elements
 * included (at most VEC - 1 before the first vector and after the last);
 * their terms sit in shared memory, one entry a thread. */
static int64_t flat_rows(const xent_config *cfg, const xent_problem *p) {
    int64_t rows = (xent_grad_capacity(cfg) + 2 * cfg->vec) / p->c + 2; /* a tile: TPR == BLOCK, SPLIT=1 */
    return rows < p->n ? rows : p->n;
}

static int flat_fits(const xent_config *cfg, const xent_problem *p, char *why, size_t len) {
    if (p->op != XENT_OP_BACKWARD) return refuse(why, len, "FLAT is the backward's");
    if (p->n > 1 && p->row_stride && p->row_stride != p->c)
        return refuse(why, len, "FLAT takes rows back to back (row stride == C)");
    if (p->c < cfg->vec) return refuse(why, len, "FLAT takes rows of at least VEC classes");
    if (flat_rows(cfg, p) > cfg->block) return refuse(why, len, "FLAT: a tile crosses more rows than BLOCK");
    if (p->n > 0x7fffffffLL / p->c * xent_grad_capacity(cfg))
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
    if (!family_knobs_only(cfg, KNOB_FWD, "xent_fwd", why, len)) return 0;
    /* fp32 chunks leave the MUFU pipe a third busy: nothing to balance */
    if (cfg->poly && (d == XENT_F32 || cfg->tile))
        return refuse(why, len, "POLY takes 16-bit logits and TILE=0 (the chunk sums it splits between pipes)");
    /* 16-bit logits are widened to fp32 as they are used, so count elements. */
    if (cfg->items * cfg->vec > xent_chunk_limit(cfg->block))
        return refuse(why, len, "ITEMS * VEC exceeds what the registers of a thread of this BLOCK hold");
    return 1;
}

long xent_pow2_ceil(long x) {
    long p = 1;
    while (p < x) p <<= 1;
    return p;
}

int xent_widest_vec(xent_dtype d) { return 16 / xent_dtype_size(d); }

/* Elements between row starts: the row stride, or c for rows back to back. */
int64_t xent_row_stride(const xent_problem *p) { return p->row_stride ? p->row_stride : p->c; }

/* The widest vector under which every row starts at the same alignment. */
int xent_stride_vec(const xent_problem *p) {
    int v = xent_widest_vec(p->logits);
    int64_t stride = xent_row_stride(p);
    while (v > 1 && stride % v) v /= 2;
    if (v * xent_dtype_size(p->logits) < 4) v = 4 / xent_dtype_size(p->logits);
    return v;
}

/* Whether every row of p starts on a 16-byte boundary (of an aligned tensor). */
int xent_rows_aligned(const xent_problem *p) { return p->n == 1 || xent_stride_vec(p) == xent_widest_vec(p->logits); }

/* Rows of this many bytes or fewer load vectors of their own alignment. */
#define SHORT_ROW_BYTES 8192
/* fp32 rows of WIDE_F32_MIN_C up to WIDE_F32_END classes load the widest
 * vector with scalar edges whatever their alignment: on odd lengths of
 * 113-231 classes VEC=4 ran 15-25% faster than VEC=1 with as many elements a
 * lane (five of five), 9% slower at 75; 16-bit rows lost 6-21% with the wide
 * vector (nine of nine, bench/pairs/short-rows-vector.txt); from 263 to 1881
 * classes the narrowed fp32 rows ran faster on nine of ten, by 5-19%
 * (bench/pairs/f32-vector-mid.txt). */
#define WIDE_F32_MIN_C 100
#define WIDE_F32_END 256

/* The vector a row of p loads: below 256 classes the one its stride keeps
 * aligned (but fp32 rows of WIDE_F32_MIN_C or more, the widest); rows of up
 * to SHORT_ROW_BYTES whose starts are 4-byte aligned or better also take
 * their alignment's vector, since scalar edges cost such rows more than
 * narrow loads do (the tuned winners of rows of 99 to 1075 classes, fp32 and
 * fp16, took it and ran 6-26% faster than with the widest vectors); longer
 * rows, and rows aligned to less than 4 bytes, the widest. */
int xent_row_vec(const xent_problem *p) {
    int64_t stride = xent_row_stride(p), esize = xent_dtype_size(p->logits);
    if (p->logits == XENT_F32 && p->c >= WIDE_F32_MIN_C && p->c < WIDE_F32_END) return xent_widest_vec(p->logits);
    int own = p->c < 256 || (p->c * esize <= SHORT_ROW_BYTES && stride * esize % 4 == 0);
    return own ? xent_stride_vec(p) : xent_widest_vec(p->logits);
}

/* The vectors of a team's segment of a row: the whole row unless split. */
long xent_seg_vectors(const xent_config *c, const xent_problem *p) {
    long nv = (p->c + c->vec - 1) / c->vec;
    return (nv + c->split - 1) / c->split;
}

/* The ITEMS that hold a lane's share of seg vectors in one chunk. */
long xent_lane_items(const xent_config *c, long seg) { return xent_pow2_ceil((seg + c->tpr - 1) / c->tpr); }

/* Splitting pays only when rows are too few to fill the GPU. */
static int split_relevant(const xent_problem *p, int sm_count, const xent_config *c) {
    if (c->split == 1) return 1;
    long seg = xent_seg_vectors(c, p);
    return p->n < 2L * sm_count && p->n * c->split <= 16L * sm_count && seg >= c->tpr * 4L && c->tpr >= 32;
}

/* Prune what cannot win for this problem: idle lanes, needless registers,
 * splits of rows that already fill the GPU. */
static int relevant(const xent_config *c, const xent_problem *p, int sm_count) {
    if (!xent_config_fits(c, p, NULL, 0)) return 0;
    int vmax = xent_widest_vec(p->logits);
    if (c->vec != vmax && c->vec != xent_stride_vec(p)) return 0;
    if (c->tile) return p->c * xent_dtype_size(p->logits) <= 256;
    if (!split_relevant(p, sm_count, c)) return 0;
    long seg = xent_seg_vectors(c, p);
    if (c->tpr > 1 && c->tpr > xent_pow2_ceil(seg)) return 0;
    if (seg > (long)c->tpr * 256 && c->tpr < 512)
        return 0; /* too many vectors per thread, unless no wider team exists */
    long fit = xent_lane_items(c, seg);
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
 * past what a cluster holds in registers, a block's or a cluster's stash or chunks read
 * twice; clusters only for long rows. */
static int grad_relevant(const xent_config *c, const xent_problem *p) {
    /* short rows also take the vector their stride keeps aligned: with the
     * widest, a team of one thread would hold up to 2 VEC - 2 scalar edges */
    if (!xent_config_fits(c, p, NULL, 0)) return 0;
    if (c->vec != xent_widest_vec(p->logits) && (p->c > 256 || c->vec != xent_stride_vec(p))) return 0;
    long per_thread = (long)c->items * c->vec;
    long cap = (long)xent_grad_capacity(c);
    long most = 512L * (GRAD_CHUNK_BYTES / xent_dtype_size(p->logits)) * MAX_GRAD_SPLIT;
    if (per_thread < 8) return 0;
    if (c->tpr <= 32 && c->block != 128 && c->block != 256) return 0;
    if (c->stash && grad_stash_bytes(c, p) == 0) return 0; /* the same kernel as STASH=0 */
    if (c->prefetch == 2 && !xent_handoff_gains(c, p)) return 0;
    /* POLY gains only where a fused fp32 row is held in registers; 16-bit
     * rows and rows read twice ran slower with it, the backward no faster */
    if (c->poly && (p->logits != XENT_F32 || p->op != XENT_OP_FUSED || cap < p->c || per_thread < 2 * c->poly))
        return 0;
    /* a flat tile: one-shot blocks of 4 or 8 loads a thread, as the streaming
     * read, for rows that start off a 16-byte boundary (rows that start on
     * one ran 12-40% slower flat: 32768x4096 fp32 and bf16, 8192x128256 bf16) */
    if (c->flat) return !xent_rows_aligned(p) && c->tpr >= 128 && (c->items == 4 || c->items == 8);
    if (p->op == XENT_OP_BACKWARD) /* one streaming pass: nothing to hold */
        return c->split == 1 && (c->tpr >= 32 ? cap <= 2 * xent_pow2_ceil(p->c) : cap >= p->c && cap < 4 * p->c);
    /* long fused rows: also a cluster of blocks whose registers, a full chunk a
     * thread, and stashes hold the row, a slice a block, up to an SM's threads */
    if (p->c > 16384 && c->stash && c->split > 1)
        return c->tpr >= 256 && c->split * c->tpr <= SM_THREADS &&
               per_thread * xent_dtype_size(p->logits) == GRAD_CHUNK_BYTES;
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
    if (persist == 1) return resident;
    long long rounds = (groups + resident - 1) / resident;
    return (groups + rounds - 1) / rounds;
}

long long xent_fwd_groups(const xent_config *cfg, const xent_problem *p) {
    long long teams = cfg->block / cfg->tpr;
    return (p->n * cfg->split + teams - 1) / teams;
}

/* One group is one block whatever PERSIST (xent_persistent_grid never gives
 * fewer blocks than groups up to a round), so the define is the problem's. */
int xent_fwd_one_block(const xent_config *cfg, const xent_problem *p) {
    return xent_problem_family(p) == XENT_FAMILY_FWD && p->reduction != XENT_REDUCE_NONE && cfg->split == 1 &&
           xent_fwd_groups(cfg, p) == 1;
}

/* Only the online pass of team rows reads edges (PASSES=1, not staged tiles): for every
 * other kernel the define would change nothing but its key in the kernel cache. */
int xent_fwd_edges_once(const xent_config *cfg, const xent_problem *p) {
    return xent_fwd_one_block(cfg, p) && cfg->passes == 1 && !cfg->tile && cfg->vec > 1 &&
           (p->c % cfg->vec || xent_row_stride(p) % cfg->vec);
}

/* Bytes of logits from which a sum or mean of whole rows is finished apart:
 * its rows' kernel sheds the last block's pass and its registers. On the
 * H100 that made mean plans of 42 MB to 1.6 GB up to 22% faster at PERSIST=0
 * and their persistent launches no more than 1% slower, while below 17 MB
 * the second launch cost more than it gave (up to 2.5 us on problems of a
 * few microseconds; bench/ab/finish-lean.txt, bench/ab/log.md). */
#define FINISH_APART_MIN_BYTES (32L << 20)

int xent_fwd_finish_apart(const xent_config *cfg, const xent_problem *p) {
    int64_t row_bytes = xent_row_stride(p) * xent_dtype_size(p->logits);
    /* divided, not multiplied: the problem may not have been checked yet */
    return xent_problem_family(p) == XENT_FAMILY_FWD && p->reduction != XENT_REDUCE_NONE && cfg->split == 1 &&
           !xent_fwd_one_block(cfg, p) && row_bytes > 0 && p->n >= (FINISH_APART_MIN_BYTES + row_bytes - 1) / row_bytes;
}

int xent_config_same_kernel(const xent_config *a, const xent_config *b) {
    xent_config x = *a, y = *b;
    x.persist = y.persist = 0;
    return !memcmp(&x, &y, sizeof x);
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

const xent_knob *xent_knob_named(const char *name, size_t n) {
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
        const xent_knob *k = xent_knob_named(s, (size_t)(eq - s));
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
    int64_t stride = xent_row_stride(p);
    size_t region = ((size_t)(32 * stride + cfg->vec) * (size_t)xent_dtype_size(p->logits) + 15) & ~(size_t)15;
    return (size_t)(cfg->block / 32) * region;
}

int xent_config_fits(const xent_config *cfg, const xent_problem *p, char *why, size_t len) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) {
        if (!xent_config_legal_for(cfg, XENT_FAMILY_GRAD, p->logits, why, len)) return 0;
        if (cfg->stash && p->op != XENT_OP_FUSED) return refuse(why, len, "STASH is the fused kernel's");
        if (cfg->prefetch == 2 && p->op != XENT_OP_FUSED && p->op != XENT_OP_BACKWARD)
            return refuse(why, len, "PREFETCH=2 hands the next row to a gradient's stores: fused or backward");
        /* no lower bound: a held row stashes nothing, so a nearest entry's STASH=1 still fits it */
        if (cfg->stash && grad_stash_bytes(cfg, p) > MAX_STASH_BYTES)
            return refuse(why, len, "STASH: the row past its first chunk exceeds the shared memory of a block");
        return !cfg->flat || flat_fits(cfg, p, why, len);
    }
    if (!xent_config_legal(cfg, p->logits, why, len)) return 0;
    int64_t stride = xent_row_stride(p);
    /* the stride test first: it keeps xent_config_smem from overflowing */
    if (cfg->tile && (stride > MAX_TILE_BYTES || xent_config_smem(cfg, p) > MAX_TILE_BYTES))
        return refuse(why, len, "TILE: 32 rows of this stride per warp exceed 48 KB of shared memory");
    /* divided, not multiplied: the problem may not have been checked yet */
    if (cfg->split > 1 && p->n > MAX_SPLIT_ITEMS / cfg->split)
        return refuse(why, len, "SPLIT: rows x segments exceed the workspace limit");
    return 1;
}

size_t xent_arch_smem(int arch) {
    switch (arch) {
    case 75: return 64 * 1024;
    case 70:
    case 72: return 96 * 1024;
    case 80:
    case 87: return 163 * 1024;
    case 90:
    case 100:
    case 103: return 227 * 1024;
    default: return 99 * 1024; /* sm_86, sm_89, sm_120 */
    }
}

/* A launch's dynamic shared memory on sm_<arch>, leaving the kernel's static
 * shared memory (its reductions' scratch, under 1 KB) room beside it. */
static size_t arch_dynamic_smem(int arch) { return xent_arch_smem(arch) - 1024; }

int xent_config_arch_fits(const xent_config *cfg, const xent_problem *p, int arch, char *why, size_t len) {
    const int grad = xent_problem_family(p) == XENT_FAMILY_GRAD;
    if (grad && cfg->split > 1 && arch < 90)
        return refuse(why, len, "SPLIT > 1 (a cluster of blocks) needs sm_90 or later");
    /* PTX's packed conversions and L2 cache policies came with sm_80 */
    if (grad && p->logits != XENT_F32 && arch < 80)
        return refuse(why, len, "the training kernels of 16-bit logits need sm_80 or later");
    if (grad && cfg->evict && arch < 80) return refuse(why, len, "EVICT (L2 cache policies) needs sm_80 or later");
    const size_t smem = xent_config_smem(cfg, p);
    if (smem > arch_dynamic_smem(arch)) {
        if (why && len)
            snprintf(why, len, "%s needs %zu bytes of shared memory, more than a block of sm_%d may have",
                     cfg->stash ? "STASH" : "TILE", smem, arch);
        return 0;
    }
    return 1;
}

int xent_handoff_gains(const xent_config *cfg, const xent_problem *p) {
    return p->op == XENT_OP_FUSED && cfg->stash && grad_stash_bytes(cfg, p) > 0;
}

void xent_config_drop_idle_handoff(xent_config *cfg, const xent_problem *p) {
    if (cfg->prefetch == 2 && !xent_handoff_gains(cfg, p)) cfg->prefetch = 0;
}

const char *xent_config_for_arch(xent_config *cfg, const xent_problem *p, int arch) {
    const int unclustered = xent_problem_family(p) == XENT_FAMILY_GRAD && cfg->split > 1 && arch < 90;
    if (unclustered) cfg->split = 1;
    /* after the cluster: a block that takes the whole row stashes all of it past its registers */
    const int unstashed = cfg->stash && xent_config_smem(cfg, p) > arch_dynamic_smem(arch);
    if (unstashed) {
        cfg->stash = 0;
        xent_config_drop_idle_handoff(cfg, p);
    }
    const int twice = xent_config_reads_twice(cfg, p);
    /* a row read twice by a block of 512 threads, as the heuristic reads rows past a cluster */
    if (unclustered && twice) cfg->tpr = cfg->block = 512;
    if (unclustered || unstashed) cfg->evict = twice;
    const char *what = unclustered && unstashed ? "no cluster (sm_90), no stash: the row read twice"
                       : unclustered            ? (twice ? "no cluster (sm_90): the row read twice" : "no cluster (sm_90)")
                       : unstashed              ? "no stash (its shared memory): the row read twice"
                                                : "";
    if (arch < 80 && cfg->evict) { /* a hint its loads can do without */
        cfg->evict = 0;
        what = *what ? "the row read twice, no EVICT (L2 cache policies)" : "no EVICT (L2 cache policies)";
    }
    return what;
}

size_t xent_space_for_arch(xent_config *cfgs, size_t n, const xent_problem *p, int arch) {
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (xent_config_arch_fits(&cfgs[i], p, arch, NULL, 0)) cfgs[kept++] = cfgs[i];
    return kept;
}

int xent_config_carries(const xent_config *cfg, int64_t c_from, const xent_problem *p) {
    if (xent_problem_family(p) != XENT_FAMILY_GRAD || cfg->flat) return 1; /* a flat tile holds no row */
    const int64_t cap = xent_grad_capacity(cfg);
    const int held_there = cap >= c_from, held_here = cap >= p->c;
    return held_there == held_here && (!held_here || cap < 4 * p->c);
}

/* A fused row read twice keeps its first read in L2 for the second (EVICT:
 * 5-8% faster at 16384x50257 fp32 and 8192x128256 bf16; held rows and the
 * backward's one read were slower with it). */
int xent_config_reads_twice(const xent_config *cfg, const xent_problem *p) {
    return p->op == XENT_OP_FUSED && !cfg->stash && xent_grad_capacity(cfg) < p->c;
}
