/*
 * gen/space — the configuration space of the kernel families: one table of
 * knobs (name, meaning, legal values), the constraints between them, the
 * text form of a configuration (gen/space.c); the fitting of a config tuned
 * for other rows and the built-in heuristic (gen/heuristic.c).
 */
#ifndef XENT_GEN_SPACE_H
#define XENT_GEN_SPACE_H

#include <stddef.h>
#include <stdint.h>
#include "xent.h"

/* Bumped when the template changes what a configuration means, so tune
 * cache entries of an older template are not used. */
#define XENT_TEMPLATE_VERSION 1
#define XENT_FAMILY "xent_fwd"

/* Kernel families: xent_fwd (the plain forward, templates/xent_fwd/) and xent_grad
 * (templates/xent_grad/: the gradient, fused forward and backward, z-loss,
 * soft-capping, shards). One config struct and one knob table serve both; a
 * knob a family does not use sits at its first value. */
typedef enum xent_family { XENT_FAMILY_FWD = 0, XENT_FAMILY_GRAD = 1 } xent_family;
/* The family that computes p. */
xent_family xent_problem_family(const xent_problem *p);
/* The tune-cache family name of p: "xent_fwd", "xent_grad/fwd", "xent_grad/fused", ... */
const char *xent_problem_family_name(const xent_problem *p);

typedef struct xent_config {
    int vec;      /* elements per vector load */
    int tpr;      /* threads per row team */
    int block;    /* threads per block */
    int items;    /* vector loads per thread per chunk */
    int passes;   /* 1 online, 2 max then sum */
    int cache;    /* load cache hint */
    int split;    /* teams per row (launch) */
    int persist;  /* 1: grid of at most the resident blocks; 3: even rounds of them (launch) */
    int tile;     /* 1: rows staged in shared memory, a thread per row */
    int prefetch; /* 1: the next chunk's loads are issued before this chunk is reduced; 2: handed off */
    int poly;     /* 4, 8: one exponential in that many on the FMA pipe (xent_fwd: 16-bit logits) */
    int evict;    /* xent_grad: 1 rows read twice stay in L2 for the second read, which evicts them */
    int stash;    /* xent_grad: 1 a fused row's chunks after the first wait in shared memory */
    int flat;     /* xent_grad: 1 the backward of rows back to back as one stream of tiles */
} xent_config;

enum knob_stage { KNOB_RENDER, KNOB_LAUNCH };
enum knob_family { KNOB_FWD = 1, KNOB_GRAD = 2 };

typedef struct xent_knob {
    const char *name; /* XENT_<name> in the template, <name>= in config text */
    const char *meaning;
    enum knob_stage stage;
    int nvalues;
    int values[12];
    size_t offset; /* of the int field in xent_config */
    int optional;  /* may be left out of config text, meaning its first value: knobs added
                      after tune caches shipped, so their entries still parse */
    int families;  /* KNOB_FWD, KNOB_GRAD: the families that use it (xent_grad renders SPLIT
                      too); a family not named takes the knob's first value */
} xent_knob;

/* The table: every knob, its legal values, and its field. */
extern const xent_knob xent_knobs[];
extern const int xent_nknobs;

int xent_knob_get(const xent_config *cfg, const xent_knob *k);
void xent_knob_set(xent_config *cfg, const xent_knob *k, int v);

/* Bytes of one logit. */
int xent_dtype_size(xent_dtype d);

/* Nonzero when cfg is legal for logits of dtype d (the constraints of the
 * template and the hardware). When why is non-NULL a reason is written. */
int xent_config_legal(const xent_config *cfg, xent_dtype d, char *why, size_t len);

/* The same for a family: xent_grad takes VEC, TPR, BLOCK, ITEMS, CACHE and
 * SPLIT (a cluster of blocks a row, at most 8), every other knob at its first value. */
int xent_config_legal_for(const xent_config *cfg, xent_family f, xent_dtype d, char *why, size_t len);

/* Enumerate the legal configs for dtype d: the full space of xent_fwd
 * (relevant == NULL) or the candidates worth timing for one problem (of
 * its family). Returns the count; writes
 * at most cap configs to out (out may be NULL to count). */
size_t xent_space_enumerate(xent_dtype d, const xent_problem *relevant, int sm_count, xent_config *out, size_t cap);

/* "VEC=4 TPR=32 BLOCK=128 ITEMS=32 PASSES=2 CACHE=0 SPLIT=1 PERSIST=1" */
int xent_config_format(const xent_config *cfg, char *buf, size_t len);
/* Parse that text; every knob must appear once with a value from its list. */
int xent_config_parse(const char *text, xent_config *cfg, char *why, size_t len);

/* Nonzero when cfg can run problem p: legal for its dtype
 * (xent_config_legal), and within the shared memory of a tile and the split
 * workspace; a legal config tuned for another shape may not. */
int xent_config_fits(const xent_config *cfg, const xent_problem *p, char *why, size_t len);
/* The shared memory a block may opt in to on sm_<arch>, by CUDA's limits
 * per architecture (99 KB for one it does not know). */
size_t xent_arch_smem(int arch);
/* Nonzero when cfg's kernel runs on sm_<arch>: clusters (xent_grad's
 * SPLIT > 1) need sm_90 or later, xent_grad's kernels of 16-bit logits and
 * its EVICT sm_80 or later, and a launch's dynamic shared memory (a stash, a
 * tile) must fit what a block of that architecture may have. */
int xent_config_arch_fits(const xent_config *cfg, const xent_problem *p, int arch, char *why, size_t len);
/* cfgs[0..n) less those sm_<arch> cannot run, in order; returns how many remain. */
size_t xent_space_for_arch(xent_config *cfgs, size_t n, const xent_problem *p, int arch);
/* A config a lookup found (tuned on another GPU, or the heuristic's) made to
 * run on sm_<arch>: a stash its shared memory cannot hold gives way to
 * reading the row twice, with the L2 priorities such rows take (EVICT),
 * which sm_75 does without. */
/* Returns what it changed ("" when nothing), for the plan's note. */
const char *xent_config_for_arch(xent_config *cfg, const xent_problem *p, int arch);
/* Blocks of a launch with `groups` item groups (a block's teams take one
 * group a round) when `resident` blocks fit the GPU at once: PERSIST=1
 * fills the GPU; PERSIST=3 keeps the rounds of 1 but the fewest blocks that
 * need them, so that no block has a last round the others lack (8192 groups
 * over 528 resident: 512 blocks of 16 rounds, not 528 of which half run a
 * 16th); PERSIST=0 launches every group, but for groups of more than one
 * round and less than two, which take 3's two even rounds instead of a
 * second, partial round of blocks (412 groups over 396: 206 blocks). */
long long xent_persistent_grid(long long groups, long long resident, int persist);
/* Item groups of a forward launch of cfg over p: a block's teams take one a round. */
long long xent_fwd_groups(const xent_config *cfg, const xent_problem *p);
/* Nonzero when cfg's forward launch over p is one block that finishes a sum
 * or mean of whole rows: its kernel is compiled for that (XENT_ONE_BLOCK). */
int xent_fwd_one_block(const xent_config *cfg, const xent_problem *p);
/* Nonzero when that one block's online pass (PASSES=1, TILE=0) reads rows with scalar edges
 * wherever the logits start (c or the row stride not a multiple of the vector): its kernel
 * loads them once (XENT_EDGES_ONCE). */
int xent_fwd_edges_once(const xent_config *cfg, const xent_problem *p);
/* Whether p's sum or mean is summed from its blocks' partials by xent_fwd_finish,
 * a kernel launched after the rows' (XENT_FINISH_APART), rather than by their last block. */
int xent_fwd_finish_apart(const xent_config *cfg, const xent_problem *p);
/* Nonzero when a and b differ at most in a static PERSIST (0, 1 or 3): the
 * same kernel, so that the same grid is the same launch. */
int xent_config_same_kernel(const xent_config *a, const xent_config *b);
/* Dynamic shared memory a launch of cfg needs for p (bytes). */
size_t xent_config_smem(const xent_config *cfg, const xent_problem *p);

/* Shared by the space (gen/space.c) and the heuristic (gen/heuristic.c). */
/* Block sizes the space offers to teams within a warp. */
#define MIN_WARP_TEAM_BLOCK 128
#define MAX_WARP_TEAM_BLOCK 512
/* Bytes of a chunk a thread of the grad family may hold in registers: 64
 * words, which a thread holding 128 16-bit logits keeps in 124 registers
 * without spilling. */
#define GRAD_CHUNK_BYTES 256
/* Dynamic shared memory a block may opt in to on sm_90 (227 KB), less room
 * for the template's own (under 1 KB). A GPU with less refuses the launch,
 * and the tuner records the failure. */
#define MAX_STASH_BYTES (226 * 1024)
/* The largest cluster of blocks sharing a training row (SPLIT) the hardware
 * guarantees without opting in. */
#define MAX_GRAD_SPLIT 8
/* Threads an SM holds (sm_80 and sm_90). */
#define SM_THREADS 2048
/* The knob called name (n characters of it); NULL if none. */
const xent_knob *xent_knob_named(const char *name, size_t n);
/* The least power of two >= x. */
long xent_pow2_ceil(long x);
/* Logits a thread may hold as one chunk in a block of this many threads. */
int xent_chunk_limit(int block);
/* Elements of dtype d in a 16-byte vector. */
int xent_widest_vec(xent_dtype d);
/* Elements between row starts: the row stride, or c for rows back to back. */
int64_t xent_row_stride(const xent_problem *p);
/* The widest vector under which every row of p starts at the same alignment. */
int xent_stride_vec(const xent_problem *p);
/* Whether every row of p starts on a 16-byte boundary (of an aligned tensor). */
int xent_rows_aligned(const xent_problem *p);
/* The vector a row of p loads (its alignment's for short rows, else the widest). */
int xent_row_vec(const xent_problem *p);
/* The vectors of a team's segment of a row of p: the whole row unless split. */
long xent_seg_vectors(const xent_config *c, const xent_problem *p);
/* The ITEMS that hold a lane's share of seg vectors in one chunk. */
long xent_lane_items(const xent_config *c, long seg);
/* Logits a training config holds of a row at once (its chunk over the team and cluster). */
int64_t xent_grad_capacity(const xent_config *cfg);

/* The built-in heuristic: a sensible config from n, c and dtype alone (the
 * table's cell, its plain loads evict-first as a fitted entry's). */
void xent_config_heuristic(const xent_problem *p, int sm_count, xent_config *cfg);
/* Whether the training family's fused kernel reads p's rows twice under cfg
 * (a block's slice longer than its chunk): EVICT's rows. */
int xent_config_reads_twice(const xent_config *cfg, const xent_problem *p);

/* Whether the handoff (PREFETCH=2) can gain on p: a fused row whose stash
 * holds something. Held rows and rows read twice ran 27-47% slower with it. */
int xent_handoff_gains(const xent_config *cfg, const xent_problem *p);

/* cfg without a handoff that cannot gain on p (an entry made for other rows,
 * or one whose stash gave way). */
void xent_config_drop_idle_handoff(xent_config *cfg, const xent_problem *p);
/* A config tuned for other rows (the nearest entry's, of n_from rows; 0:
 * unknown), fitted to p's: its segments a row scaled so that rows x segments
 * stay about the entry's (split rows only), its vector narrowed to the one
 * p's rows load (xent_row_vec, where that is narrower) with as many elements
 * a chunk, its team narrowed to the vectors of a row's segment and its chunk
 * to a lane's share, two passes made one where the segment outgrows a chunk,
 * a 16-bit row's warp team widened where rows are too few for sm_count SMs,
 * a small sum or mean fitted to one block, and plain loads made evict-first;
 * unchanged where that does not fit. */
void xent_config_fit_rows(xent_config *cfg, int64_t n_from, const xent_problem *p, int sm_count);
/* Whether a training-family config tuned for rows of c_from classes suits
 * p's rows as they are: a row it held in registers is held here too, at least
 * a quarter of the chunk used, and a row it took chunk by chunk is longer
 * than a chunk here too. A config of the other kind runs, but far from tuned
 * (a held 4096-class fp32 config on rows of 50257: 1.58x the copy, the
 * heuristic 1.16x). Always true for xent_fwd, whose configs fit_rows fits,
 * and for FLAT, which holds no row. */
int xent_config_carries(const xent_config *cfg, int64_t c_from, const xent_problem *p);

#endif
