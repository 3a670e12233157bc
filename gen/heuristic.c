/* gen/heuristic.c — a config for a problem no tune answered exactly: an entry
 * tuned for other rows fitted to the problem's (xent_config_fit_rows), and the
 * built-in heuristic (a table made from the shipped tunes, a rule where its
 * cell does not fit, and the training family's own). */
#include <stdint.h>
#include <string.h>

#include "gen/space.h"

/* No team wider than seg vectors: a team wider than a warp is its block, and
 * one narrowed from a block to a warp or less takes the smallest block such
 * teams use. */
static void narrow_team(xent_config *cfg, long seg) {
    long widest = xent_pow2_ceil(seg);
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
    long seg = xent_seg_vectors(cfg, p);
    narrow_team(cfg, seg);
    long fit = xent_lane_items(cfg, seg);
    if (cfg->items > fit) cfg->items = (int)fit;
    if (cfg->passes == 2 && cfg->items < fit) cfg->passes = 1;
}

/* The chunks of cfg's team that a segment of p's row takes. */
static long seg_chunks(const xent_config *cfg, const xent_problem *p) {
    long chunk = (long)cfg->tpr * cfg->items;
    return (xent_seg_vectors(cfg, p) + chunk - 1) / chunk;
}

/* A lane chunk up to which a row of two chunks takes one of twice the items. */
#define ONE_CHUNK_MAX_ITEMS 4
#define ONE_CHUNK_MAX_ELEMS 16

/* Whether a row that two short lane chunks hold takes one chunk of twice the
 * items: one round trip a row instead of two. On an H100, fitted plans of rows up
 * to twice their chunk ran 3-9% faster so where a lane then loads up to 8
 * vectors of 32 logits in all (8 of 8 problems); 16-bit lanes of 64 logits
 * ran 0.95-1.13 (bench/pairs/one-chunk-rows.txt), and fp32 lanes of 16
 * scalar loads slower on 10 of 10 rows of 557-1023 classes
 * (docs/random-problems.md). */
static int takes_one_chunk(const xent_config *cfg, const xent_problem *p) {
    return cfg->split == 1 && seg_chunks(cfg, p) == 2 && cfg->items <= ONE_CHUNK_MAX_ITEMS &&
           cfg->items * cfg->vec <= ONE_CHUNK_MAX_ELEMS && 2 * cfg->items * cfg->vec <= xent_chunk_limit(cfg->block);
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
    long seg = xent_seg_vectors(cfg, p), chunk = (long)cfg->tpr * cfg->items;
    while (seg > chunk && chunk_use(seg, chunk) < 75 &&
           cfg->items * cfg->vec * xent_dtype_size(p->logits) > MIN_LANE_CHUNK_BYTES) {
        cfg->items /= 2;
        chunk /= 2;
    }
}

/* A 16-bit row of two chunks that still leave a quarter of their loads
 * masked out with each lane at MIN_LANE_CHUNK_BYTES (fit_chunks) takes three
 * chunks of a warp team half as wide instead, more rows a block, where the
 * narrower teams of p's rows still fill every SM's threads. On an H100, such
 * fitted plans ran 0.78-0.99 of the entry's team on 30 of 34 problems of
 * 20-500 MB, within 1% on 2 and 1.02-1.06 on 2; fp32 rows ran 1.01-1.09 (7 of
 * 7), rows of three chunks narrowed to five 0.97-1.13 (slower on 6 of 14), and
 * 3951x529 bf16, whose rows fill a quarter of the SMs' threads, 1.10
 * (bench/pairs/narrow-team.txt, narrow-two-chunks.txt). A row that two short
 * chunks hold takes one chunk instead (takes_one_chunk). The rows' bound
 * gives at least SM_THREADS / BLOCK >= 4 blocks an SM, so widen_team leaves it. */
static void narrow_to_chunks(xent_config *cfg, const xent_problem *p, int sm_count) {
    long seg = xent_seg_vectors(cfg, p), chunk = (long)cfg->tpr * cfg->items;
    if (p->logits != XENT_F32 && seg_chunks(cfg, p) == 2 && chunk_use(seg, chunk) < 75 && cfg->tpr > 1 &&
        cfg->tpr <= 32 && cfg->split == 1 && p->n * (cfg->tpr / 2) >= (int64_t)SM_THREADS * sm_count &&
        !takes_one_chunk(cfg, p))
        cfg->tpr /= 2;
}

/* Segments a row for p's rows from a split made for n_from: about as many
 * teams as the entry ran (rows x segments), since splitting is there to fill
 * the GPU when rows are few; none where p's rows alone are as many. */
static void fit_split(xent_config *cfg, int64_t n_from, const xent_problem *p) {
    if (cfg->split == 1 || n_from <= 0) return;
    const xent_knob *k = xent_knob_named("SPLIT", 5);
    const int most = k->values[k->nvalues - 1];
    int64_t teams = n_from * cfg->split;
    int split = 1;
    while (split < most && 2 * split * p->n <= teams) split *= 2;
    cfg->split = split;
}

/* 16-bit rows too few to give every SM FEW_BLOCKS_PER_SM_X10 / 10 blocks
 * take a warp team twice as wide with half the chunk a lane: twice the warps
 * on the same rows, to cover the loads' latency. On the H200, below 3.2
 * blocks an SM seven of nine 16-bit plans ran 5-15% faster so, one as fast
 * and one 2% slower; above it sixteen of nineteen ran slower, up to 40%.
 * fp32 plans below the bound split: four 3-8% faster, two as fast, two 8%
 * and 17% slower, so fp32 keeps its team (bench/pairs/team-width*.txt,
 * docs/random-problems.md). */
#define FEW_BLOCKS_PER_SM_X10 32

static void widen_team(xent_config *cfg, const xent_problem *p, int sm_count) {
    /* a warp team stays within its block: BLOCK is 64 or more */
    if (p->logits == XENT_F32 || sm_count <= 0 || cfg->split > 1 || cfg->items < 2 || 2 * cfg->tpr > 32) return;
    if (2L * cfg->tpr > xent_pow2_ceil(xent_seg_vectors(cfg, p))) return;                  /* lanes would idle */
    if (10 * xent_fwd_groups(cfg, p) >= (int64_t)FEW_BLOCKS_PER_SM_X10 * sm_count) return; /* a block a group */
    cfg->tpr *= 2;
    cfg->items /= 2;
}

/* Bytes of logits up to which a sum or mean takes one block (below). */
#define ONE_BLOCK_MAX_BYTES 16384

static long pow2_floor(long x) {
    long p = 1;
    while (2 * p <= x) p <<= 1;
    return p;
}

/* A sum or mean of a few KB takes one block where its rows fit one: that
 * block writes the loss from its own sums (XENT_ONE_BLOCK), without the
 * arrival and the read back of every block's partial that cost 1-2 us of a
 * launch of a few. Its rows go to teams narrowed until the block holds them
 * all, a team holding its row in one chunk, so that the block loads the
 * whole problem in one round; a block of up to 512 threads where 128 do not
 * hold them. On the H100, 25x175 f16 with weights ran 5.6 us on 7 blocks of
 * warp teams and 3.8 on one block of 4-lane teams; 5x249 f16 5.8 on 2 blocks
 * and 3.7 on one (docs/random-problems.md). The bound keeps to problems the
 * block loads in one round of a few KB: 13x8296 bf16 (216 KB) ran faster on
 * 26 blocks than on 13. */
static void fit_one_block(xent_config *cfg, const xent_problem *p) {
    int64_t row_bytes = xent_row_stride(p) * xent_dtype_size(p->logits);
    /* divided, not multiplied: the problem may not have been checked yet */
    if (p->reduction == XENT_REDUCE_NONE || cfg->split != 1 || cfg->tile || p->n < 2 ||
        xent_fwd_groups(cfg, p) == 1 || row_bytes <= 0 || p->n > ONE_BLOCK_MAX_BYTES / row_bytes)
        return;
    for (int block = cfg->block < 128 ? 128 : cfg->block; block <= 512; block *= 2) {
        xent_config one = *cfg;
        long tpr = pow2_floor(block / p->n); /* teams of a block: at least n */
        if (tpr > 32) tpr = 32;              /* a team narrower than its block is a warp or less */
        if (tpr > cfg->tpr) tpr = cfg->tpr;
        one.tpr = (int)tpr;
        long items = xent_lane_items(&one, xent_seg_vectors(&one, p)); /* the row in one chunk */
        if (items * one.vec > xent_chunk_limit(block)) continue;
        one.block = block;
        one.items = (int)items;
        one.poly = 0; /* a block of a few KB is paced by its issue, which the polynomial adds to */
        if (xent_fwd_one_block(&one, p) && xent_config_fits(&one, p, NULL, 0)) {
            *cfg = one;
            return;
        }
    }
}

/* A plan made for another problem loads evict-first (CACHE=2) where it
 * holds plain loads: an entry's CACHE=0 is often the structure stage's
 * default that its tune never timed against the hints (docs/cache.md), and
 * on the plans the lookup gave problems of 0.8-70 MB evict-first was 3-8%
 * faster on seven of eleven and no more than 1% slower on any, on the H100
 * and the H200, while larger problems ran within 1.2% either way
 * (bench/pairs/cache-evict-first.txt). A hint an entry holds (1 or 2) was
 * timed against the others and stays. */
static void evict_first(xent_config *cfg) {
    if (!cfg->tile && cfg->cache == 0) cfg->cache = 2;
}

/* 16-bit rows of at most this many bytes whose stride is odd, in problems of
 * at most TILE_ODD_MAX_BYTES, are staged (below). */
#define TILE_ODD_ROW_BYTES 32
#define TILE_ODD_MAX_BYTES 65536

/* Short 16-bit rows on an odd stride start off every 4-byte boundary, so a
 * team loads them an element at a time; a warp that stages 32 of them in
 * shared memory by 16-byte loads of the whole span (TILE=1) reads them in
 * one round. On an H100, against the lookup's team plans in one process:
 * 2x2 bf16 of stride 37 2.98 us against 3.14, 3x11 bf16 2.87 against 3.04,
 * 564x5 bf16 none of stride 31 2.62 against 3.14, 50x9 bf16 3.02 against
 * 3.42, and no slower on 2000x13 f16 (52 KB) or 37x3 bf16; the H200's tunes
 * staged the first two. Rows of 27 f16 (54 bytes) kept teams in the tunes
 * on both cards, and larger problems were not timed (docs/cache.md). */
static void stage_odd_rows(xent_config *cfg, const xent_problem *p) {
    int64_t stride = xent_row_stride(p), esize = xent_dtype_size(p->logits);
    /* 16-bit only: an even stride keeps every row on a 4-byte boundary, and
     * fp32 rows always are. Divided, not multiplied: the problem may not have
     * been checked yet. */
    if (xent_problem_family(p) != XENT_FAMILY_FWD || esize != 2 || p->n < 2 || stride <= 0 || stride % 2 == 0 ||
        p->c > TILE_ODD_ROW_BYTES / esize || p->n > TILE_ODD_MAX_BYTES / (esize * stride))
        return;
    xent_config t = *cfg;
    t.tile = 1;
    t.vec = xent_widest_vec(p->logits);
    t.tpr = t.items = 1;
    t.block = 128;
    t.passes = 2;
    t.split = 1;
    t.poly = t.prefetch = 0;
    if (xent_config_fits(&t, p, NULL, 0)) *cfg = t;
}

/* What every plan made for another problem takes last, a fitted entry's
 * and the heuristic's alike. */
static void fit_untuned(xent_config *cfg, const xent_problem *p) {
    stage_odd_rows(cfg, p);
    fit_one_block(cfg, p);
    evict_first(cfg);
}

void xent_config_fit_rows(xent_config *cfg, int64_t n_from, const xent_problem *p, int sm_count) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) xent_config_drop_idle_handoff(cfg, p);
    if (xent_problem_family(p) != XENT_FAMILY_FWD || cfg->tile) return;
    xent_config fitted = *cfg;
    fit_split(&fitted, n_from, p);
    int v = xent_row_vec(p);
    if (v < cfg->vec) { /* as many elements a chunk, in narrower loads */
        long items = (long)cfg->items * cfg->vec / v, most = xent_chunk_limit(cfg->block) / v;
        fitted.items = (int)(items > 32 ? 32 : items > most ? most : items);
        fitted.vec = v;
    }
    fit_team(&fitted, p);
    fit_chunks(&fitted, p);
    narrow_to_chunks(&fitted, p, sm_count);
    widen_team(&fitted, p, sm_count);
    if (takes_one_chunk(&fitted, p)) fitted.items *= 2;
    fit_untuned(&fitted, p);
    if (xent_config_fits(&fitted, p, NULL, 0)) *cfg = fitted;
}

/* xent_grad: 16 elements a thread, the fewest threads that hold the row,
 * in teams of up to 512; past that the row is stashed, or held by a cluster
 * of blocks, or else read twice by 512 threads of 256 bytes a chunk (the
 * backward, one read, 128). A thread holds 32 fp32
 * logits in teams of at least 64, or up to 128 16-bit ones in teams of at
 * least a warp (the backward, which holds nothing across a reduction, 32 of
 * either). The tuned fused winners on the H200: at 32768x4096 bf16 a warp
 * of 128 logits a lane (150 us, against 170 for 128 threads of 32), fp32
 * there 32 a lane (285 us, 291 at 64); read twice, 16384x50257 fp32 and
 * 8192x128256 bf16 at 256 bytes a lane, 1.09x and 1.22x faster than 128
 * and 64; rows past a chunk keep the chunks past the first in shared memory
 * and hand the next row's first chunk to the last chunk's stores (STASH=1,
 * PREFETCH=2: 16384x50257 fp32 1724 us against 1770 read twice with EVICT,
 * 8192x128256 bf16 1083 against 1112 stashed alone, 8192x50257 bf16 443
 * against 462; stashed alone, fp32 was slower than read twice). */
static void grad_heuristic(const xent_problem *p, xent_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < xent_nknobs; i++) xent_knob_set(cfg, &xent_knobs[i], xent_knobs[i].values[0]);
    long threads = (p->c + 15) / 16;
    if (threads <= 32) { /* 16 elements a lane, in vectors the row stride keeps aligned */
        cfg->vec = p->c > 256 ? xent_widest_vec(p->logits) : xent_stride_vec(p);
        cfg->items = 16 / cfg->vec;
        cfg->tpr = (int)xent_pow2_ceil(threads);
        cfg->block = 128;
        return;
    }
    const int bwd = p->op == XENT_OP_BACKWARD, wide = p->logits == XENT_F32 || bwd;
    const long per = wide ? 32 : GRAD_CHUNK_BYTES / 2, least = wide ? 64 : 32;
    cfg->vec = xent_widest_vec(p->logits);
    threads = (p->c + per - 1) / per;
    cfg->tpr = (int)(threads <= least ? least : threads >= 512 ? 512 : xent_pow2_ceil(threads));
    cfg->block = cfg->tpr < 64 ? 128 : cfg->tpr;
    const long most = (bwd ? GRAD_CHUNK_BYTES / 2 : GRAD_CHUNK_BYTES) / (cfg->vec * xent_dtype_size(p->logits));
    const long items = xent_pow2_ceil((p->c + (long)cfg->tpr * cfg->vec - 1) / ((long)cfg->tpr * cfg->vec));
    cfg->items = (int)(items < most ? items : most); /* the fewest that hold the row */
    /* rows past a chunk keep the rest in shared memory where it fits */
    cfg->stash = xent_config_reads_twice(cfg, p);
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
    /* A fused row that neither a block's registers nor its stash hold is read
     * twice, the second time from L2 only while the rows in flight fit it: a
     * block a row on each of 132 SMs keeps 53 MB in flight at 200064 bf16 or
     * 100000 fp32 classes, 68 MB at 256000 or 128256, where the L2 holds 50.
     * The fewest 512-thread blocks of a cluster whose registers and stashes
     * hold the row read it once, a slice a block (sm_90; xent_config_for_arch
     * reads it twice elsewhere), up to an SM's threads: 8192x128256 fp32 2868
     * us by 2 blocks against 3628 read twice and 3238 by 4 holding it in
     * registers alone; 8192x256000 bf16 2868 against 3654 and 3190 by 8 of
     * 256; 8192x100000 fp32 2281 against 2667 (bench/ab/log.md). Where
     * one block's stash holds the row, it stays: a cluster of two was 3-12%
     * slower there. */
    if (xent_config_reads_twice(cfg, p)) {
        xent_config held = *cfg;
        held.stash = 1, held.evict = 0;
        for (held.split = 2; held.split * held.tpr <= SM_THREADS; held.split *= 2)
            if (xent_config_fits(&held, p, NULL, 0)) {
                *cfg = held;
                break;
            }
    }
    cfg->evict = xent_config_reads_twice(cfg, p);
    cfg->prefetch = xent_handoff_gains(cfg, p) ? 2 : 0;
    /* the backward of fp32 rows that start off a 16-byte boundary streams
     * them flat: a team a row takes scalar edges and a short last chunk
     * (16384x50257: 1654 us flat by 128 threads of 8 loads, against 1720 a
     * row by 512 threads; 1840 by 256 threads of streaming loads) */
    if (bwd && p->logits == XENT_F32 && !xent_rows_aligned(p)) {
        xent_config flat = *cfg;
        flat.flat = 1, flat.tpr = flat.block = 128, flat.items = 8, flat.cache = 0, flat.stash = 0, flat.evict = 0;
        if (xent_config_fits(&flat, p, NULL, 0)) *cfg = flat;
    }
    /* a held fused fp32 row takes one exponential in eight by the polynomial
     * (32768x4096: 282.5 us against 285.3, and 290.9 against 294.2 at 64
     * threads a row); 16-bit and re-read rows were slower with it, and so was
     * a row a cluster holds (8192x128256: 3259 us against 3234) */
    cfg->poly = p->logits == XENT_F32 && p->op == XENT_OP_FUSED && xent_grad_capacity(cfg) >= p->c &&
                        cfg->items * cfg->vec >= 32 && cfg->split == 1
                    ? 8
                    : 0;
}

/* The rule the table falls back to where its cell does not fit the problem
 * (a tile of a long stride): rows that fit a warp's registers are held there
 * (two passes, no re-read); longer rows stream through a whole block; few
 * rows are split. Legal for every problem. */
static void rule_heuristic(const xent_problem *p, int sm_count, xent_config *cfg) {
    cfg->vec = xent_row_vec(p);
    cfg->cache = 0;
    /* TILE is the tuner's to pick: staged by whole blocks it ran 28.9 us at 1048576x10,
     * a thread per row 23.3; staged per warp it is not measured yet */
    cfg->tile = 0;
    cfg->persist = 1;
    cfg->split = 1;
    cfg->prefetch = 0;
    cfg->poly = 0;
    long nv = (p->c + cfg->vec - 1) / cfg->vec;
    int max_items = xent_chunk_limit(128) / cfg->vec;
    if (nv <= 2L * 32 * max_items) { /* a warp per row, one or two chunks */
        long tpr = xent_pow2_ceil((nv + 7) / 8);
        cfg->tpr = (int)(tpr > 32 ? 32 : tpr);
        long fit = xent_pow2_ceil((nv + cfg->tpr - 1) / cfg->tpr);
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
    cfg->items = xent_chunk_limit(512) / cfg->vec;
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
    {4, 173, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 f32, measured */
    {4, 173, HEUR_MID, 8, 128, 64, 1, 0, 0, 1, 0}, /* 1024x100 f32, measured */
    {4, 173, HEUR_MANY, 4, 128, 128, 2, 0, 0, 1, 0}, /* 1048576x100 f32, measured */
    {4, 547, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 f32, nearest band */
    {4, 547, HEUR_MID, 8, 128, 64, 1, 0, 0, 1, 0}, /* 1024x100 f32, nearest band */
    {4, 547, HEUR_MANY, 4, 128, 128, 1, 0, 0, 1, 0}, /* 262144x300 f32, measured */
    {4, 1414, HEUR_FEW, 128, 128, 32, 1, 0, 0, 1, 0}, /* 1x1000 f32, measured */
    {4, 1414, HEUR_MID, 32, 128, 128, 1, 0, 0, 1, 0}, /* 256x1000 f32, measured */
    {4, 1414, HEUR_MANY, 16, 128, 128, 1, 0, 0, 1, 0}, /* 262144x1000 f32, measured */
    {4, 2862, HEUR_FEW, 128, 128, 32, 1, 0, 0, 1, 0}, /* 1x1000 f32, nearest band */
    {4, 2862, HEUR_MID, 32, 128, 128, 1, 0, 0, 1, 0}, /* 256x1000 f32, nearest band */
    {4, 2862, HEUR_MANY, 32, 128, 256, 1, 0, 0, 1, 0}, /* 131072x2000 f32, measured */
    {4, 7010, HEUR_FEW, 128, 128, 128, 1, 1, 0, 1, 0}, /* 64x4096 f32, measured */
    {4, 7010, HEUR_MID, 32, 128, 128, 1, 1, 0, 0, 0}, /* 1024x4096 f32, measured */
    {4, 7010, HEUR_MANY, 32, 128, 128, 1, 0, 0, 1, 0}, /* 65536x4096 f32, measured */
    {4, 19595, HEUR_FEW, 128, 128, 128, 1, 1, 0, 1, 0}, /* 64x4096 f32, nearest band */
    {4, 19595, HEUR_MID, 32, 128, 128, 1, 0, 0, 1, 0}, /* 2048x12000 f32, measured */
    {4, 19595, HEUR_MANY, 128, 128, 128, 1, 0, 0, 1, 0}, /* 16384x12000 f32, measured */
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
    {2, 173, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 bf16, measured */
    {2, 173, HEUR_MID, 8, 128, 32, 1, 0, 0, 1, 0}, /* 1024x100 bf16, measured */
    {2, 173, HEUR_MANY, 2, 128, 128, 2, 0, 0, 1, 0}, /* 1048576x100 bf16, measured */
    {2, 547, HEUR_FEW, 32, 128, 16, 1, 0, 0, 1, 0}, /* 1x100 bf16, nearest band */
    {2, 547, HEUR_MID, 8, 128, 32, 1, 0, 0, 1, 0}, /* 1024x100 bf16, nearest band */
    {2, 547, HEUR_MANY, 2, 256, 64, 1, 0, 0, 1, 0}, /* 262144x300 bf16, measured */
    {2, 1414, HEUR_FEW, 128, 128, 16, 1, 0, 0, 1, 0}, /* 1x1000 bf16, measured */
    {2, 1414, HEUR_MID, 32, 128, 64, 1, 0, 0, 1, 0}, /* 256x1000 bf16, measured */
    {2, 1414, HEUR_MANY, 8, 128, 128, 1, 0, 0, 1, 0}, /* 262144x1000 bf16, measured */
    {2, 2862, HEUR_FEW, 128, 128, 16, 1, 0, 0, 1, 0}, /* 1x1000 bf16, nearest band */
    {2, 2862, HEUR_MID, 32, 128, 64, 1, 0, 0, 1, 0}, /* 256x1000 bf16, nearest band */
    {2, 2862, HEUR_MANY, 16, 128, 128, 1, 0, 0, 1, 0}, /* 131072x2000 bf16, measured */
    {2, 7010, HEUR_FEW, 128, 128, 64, 2, 0, 0, 1, 0}, /* 64x4096 bf16, measured */
    {2, 7010, HEUR_MID, 64, 64, 64, 1, 0, 0, 1, 0}, /* 1024x4096 bf16, measured */
    {2, 7010, HEUR_MANY, 8, 256, 128, 1, 2, 0, 1, 0}, /* 65536x4096 bf16, measured */
    {2, 19595, HEUR_FEW, 128, 128, 64, 2, 0, 0, 1, 0}, /* 64x4096 bf16, nearest band */
    {2, 19595, HEUR_MID, 32, 128, 128, 1, 0, 0, 1, 0}, /* 2048x12000 bf16, measured */
    {2, 19595, HEUR_MANY, 32, 128, 128, 1, 0, 0, 1, 0}, /* 16384x12000 bf16, measured */
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

/* A cell's chunk bytes as loads of this VEC, within a thread's registers. */
static int heur_items(const heur_cell *h, const xent_config *cfg, xent_dtype d) {
    if (cfg->tile) return 1;
    long items = pow2_floor(h->chunk / (cfg->vec * xent_dtype_size(d)));
    if (items > 32) items = 32;
    while (items > 1 && items * cfg->vec > xent_chunk_limit(cfg->block)) items /= 2;
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
    cfg->vec = xent_row_vec(p);
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
    cfg->split = heur_split(p, sm_count, cfg);
    fit_chunks(cfg, p);
    return 1;
}

/* The table's cell, or the rule where the cell does not fit the problem. */
void xent_config_heuristic(const xent_problem *p, int sm_count, xent_config *cfg) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) {
        grad_heuristic(p, cfg);
        return;
    }
    if (!table_heuristic(p, sm_count, cfg) || !xent_config_fits(cfg, p, NULL, 0)) rule_heuristic(p, sm_count, cfg);
    fit_untuned(cfg, p);
}
