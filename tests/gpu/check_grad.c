/*
 * check_grad.c — the GPU suite of the training ops (templates/xent_grad/): loss, lse
 * and gradient of the fused, backward, rescale and shard paths against the
 * float64 CPU reference (xent_ref_train), over a table of cases; then the
 * time of the fused, backward and rescale plans beside a device copy of the same bytes.
 *
 * Each case draws fresh inputs (seed printed; XENT_TEST_SEED repeats it),
 * poisons every output with NaN bytes, runs the op twice (the sums must be
 * bitwise equal) and compares:
 *   loss, lse:  norm-wise relative error <= 1e-5 (the fp32 outputs; a backward's from its forward);
 *   gradient:   norm-wise relative error against the reference rounded to the
 *               gradient's dtype (xent_ref_round) <= tune_grad_tolerance: 1e-5
 *               (fp32), 1e-4 (16-bit), and for the rescale, rounded twice, 1e-3 (f16)
 *               and 8e-3 (bf16);
 *   ignored rows' gradient exactly 0, the padding of strided rows untouched.
 * Shards: the vocabulary is cut into k column shards; each runs its forward
 * into stats, XENT_OP_COMBINE gives the loss and the global lse, each shard's
 * backward its columns; the whole must equal the unsharded reference.
 *
 * CK_EXCLUDE_TAGS=perf leaves the timing out.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"
#include "tests/files.h"
#include "tests/rand.h"
#include "tests/run_suite.h"
#include "tune/bufs.h"
#include "tune/reference.h"
#include "xent.h"

enum { FUSED, BACKWARD, FORWARD, RESCALE, SHARDS };

typedef struct gcase {
    const char *name;
    int64_t n, c, pad; /* row_stride = c + pad */
    xent_dtype dt;
    xent_index it;
    xent_reduction red;
    int weights;
    float eps, z, cap;
    int kind;    /* FUSED, ... */
    int inplace; /* the gradient over the logits */
    int shards;
    float dloss;        /* 0: none given (fused), else its value */
    int offset;         /* logits pointer this many elements past an aligned start */
    const char *config; /* NULL: the plan's own */
} gcase;

static const gcase cases[] = {
    {"fused f32 mean", 257, 1000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused f32 4096", 300, 4096, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused f32 sum dloss", 64, 4096, 0, XENT_F32, XENT_I32, XENT_REDUCE_SUM, 0, 0, 0, 0, FUSED, 0, 0, 2.5f, 0, NULL},
    {"fused f32 none dloss", 64, 777, 0, XENT_F32, XENT_I64, XENT_REDUCE_NONE, 0, 0, 0, 0, FUSED, 0, 0, 0.5f, 0, NULL},
    {"fused bf16 50257", 40, 50257, 0, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused f16 weights smooth", 100, 3000, 0, XENT_F16, XENT_I64, XENT_REDUCE_MEAN, 1, 0.1f, 0, 0, FUSED, 0, 0, 0, 0,
     NULL},
    {"fused f32 weights sum", 100, 513, 0, XENT_F32, XENT_I64, XENT_REDUCE_SUM, 1, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused f32 smooth none", 50, 2000, 0, XENT_F32, XENT_I64, XENT_REDUCE_NONE, 0, 0.2f, 0, 0, FUSED, 0, 0, 0, 0,
     NULL},
    {"fused z-loss", 128, 1024, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 1e-3f, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused softcap", 128, 1500, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 3.0f, FUSED, 0, 0, 0, 0, NULL},
    {"fused bf16 softcap z smooth", 64, 5000, 0, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0.1f, 1e-4f, 30.0f, FUSED, 0,
     0, 0, 0, NULL},
    {"fused in place bf16", 64, 4096, 0, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 1, 0, 0, 0, NULL},
    {"fused in place f32 odd", 33, 1001, 0, XENT_F32, XENT_I64, XENT_REDUCE_SUM, 0, 0, 0, 0, FUSED, 1, 0, 0, 0, NULL},
    {"fused padded rows", 77, 999, 5, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused offset start", 77, 999, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 3, NULL},
    {"fused strided unaligned", 77, 999, 5, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 3, NULL},
    {"fused bf16 strided unaligned", 77, 2049, 3, XENT_BF16, XENT_I32, XENT_REDUCE_MEAN, 0, 0.05f, 0, 0, FUSED, 0, 0, 0,
     1, NULL},
    {"fused tiny c", 1000, 10, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused c=1", 17, 1, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused n=1 big c", 1, 300000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"fused long rows re-read", 16, 200000, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0.1f, 0, 0, FUSED, 0, 0, 0, 0,
     NULL},
    {"fused cluster 4", 64, 30000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=4 PERSIST=0"},
    {"fused cluster 8 loop", 8, 100000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0.1f, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=4 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=8 PERSIST=0"},
    {"fused warp teams", 500, 100, 0, XENT_F16, XENT_I64, XENT_REDUCE_MEAN, 1, 0.1f, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=2 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0"},
/* PREFETCH: more rows than the grid, so that teams carry the next row's
 * chunk across rows (in place, loop mode, unaligned edges, clusters) */
#define PF " PASSES=1 CACHE=0 TILE=0 PERSIST=0 PREFETCH=1"
#define ST " PASSES=1 CACHE=0 TILE=0 PERSIST=0 STASH=1"
    {"prefetch held in place", 3000, 4096, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 1, 0, 0, 0,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=4 SPLIT=1" PF},
    {"prefetch loop bf16 in place", 3000, 20000, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0.1f, 0, 0, FUSED, 1, 0, 0,
     0, "VEC=8 TPR=256 BLOCK=256 ITEMS=2 SPLIT=1" PF},
    /* a sum: a mean's gradients over 60000 rows are f16 subnormals */
    {"prefetch warp teams strided", 60000, 100, 3, XENT_F16, XENT_I32, XENT_REDUCE_SUM, 1, 0, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=2 SPLIT=1" PF},
    {"prefetch cluster 4", 2000, 30000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=4 SPLIT=4" PF},
    {"stash f32 in place offset", 300, 50257, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 1, 0, 0, 1,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=4 SPLIT=1" ST},
    {"stash bf16 cluster smooth", 64, 128256, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0.1f, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=8 TPR=256 BLOCK=256 ITEMS=8 SPLIT=2 EVICT=1" ST},
    {"stash f16 weights softcap", 100, 30000, 0, XENT_F16, XENT_I32, XENT_REDUCE_NONE, 1, 0, 0, 30.0f, FUSED, 0, 0,
     0.5f, 0, "VEC=8 TPR=256 BLOCK=256 ITEMS=4 SPLIT=1" ST},
    {"poly f32 in place smooth weights", 300, 4096, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 1, 0.1f, 0, 0, FUSED, 1, 0,
     0, 1, "VEC=4 TPR=128 BLOCK=128 ITEMS=8 SPLIT=1 PASSES=1 CACHE=0 TILE=0 PERSIST=0 POLY=8"},
    {"poly f32 cluster softcap z none", 64, 30000, 0, XENT_F32, XENT_I32, XENT_REDUCE_NONE, 0, 0, 1e-3f, 20.0f, FUSED,
     0, 0, 0.5f, 0, "VEC=4 TPR=256 BLOCK=256 ITEMS=16 SPLIT=2 PASSES=1 CACHE=0 TILE=0 PERSIST=0 POLY=4"},
    {"prefetch backward", 2500, 5000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, BACKWARD, 0, 0, 1.5f, 0,
     "VEC=4 TPR=128 BLOCK=128 ITEMS=4 SPLIT=1" PF},
    {"prefetch forward", 6000, 3000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0.1f, 1e-3f, 20.0f, FORWARD, 0, 0, 0,
     0, "VEC=4 TPR=64 BLOCK=64 ITEMS=4 SPLIT=1" PF},
#undef PF
/* PREFETCH=2: the next row handed to the last gradient chunk's registers
 * (held rows in place, rows read twice from an offset start, a stash, warp
 * teams of strided rows, clusters, the backward) */
#define HO " PASSES=1 CACHE=0 TILE=0 PERSIST=0 PREFETCH=2"
    {"handoff held bf16 in place", 3000, 4096, 0, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 1, 0, 0, 0,
     "VEC=8 TPR=32 BLOCK=256 ITEMS=16 SPLIT=1" HO},
    {"handoff read twice f32 in place offset", 600, 50257, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED,
     1, 0, 0, 1, "VEC=4 TPR=512 BLOCK=512 ITEMS=16 SPLIT=1 EVICT=1" HO},
    {"handoff stash bf16 smooth", 300, 128256, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0.1f, 0, 0, FUSED, 0, 0, 0,
     0, "VEC=8 TPR=512 BLOCK=512 ITEMS=16 SPLIT=1 STASH=1" HO},
    {"handoff warp teams strided", 60000, 100, 3, XENT_F16, XENT_I32, XENT_REDUCE_SUM, 1, 0, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=2 SPLIT=1" HO},
    {"handoff cluster 4 softcap", 2000, 30000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 20.0f, FUSED, 0, 0, 0,
     0, "VEC=4 TPR=256 BLOCK=256 ITEMS=4 SPLIT=4" HO},
    {"handoff stash cluster 2 f32 in place offset weights", 300, 100000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 1,
     0, 0, 0, FUSED, 1, 0, 0, 1, "VEC=4 TPR=512 BLOCK=512 ITEMS=16 SPLIT=2 STASH=1" HO},
    {"stash cluster 4 f16 none z softcap", 40, 400000, 0, XENT_F16, XENT_I32, XENT_REDUCE_NONE, 0, 0, 1e-3f, 20.0f,
     FUSED, 0, 0, 0.5f, 0, "VEC=8 TPR=512 BLOCK=512 ITEMS=16 SPLIT=4" ST},
    {"handoff backward in place", 2500, 5000, 0, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0.1f, 0, 0, BACKWARD, 1, 0,
     1.5f, 0, "VEC=8 TPR=128 BLOCK=128 ITEMS=4 SPLIT=1" HO},
#undef HO
    {"backward f32 mean", 200, 4096, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, BACKWARD, 0, 0, 1.0f, 0,
     NULL},
    {"backward bf16 none", 100, 3333, 0, XENT_BF16, XENT_I64, XENT_REDUCE_NONE, 0, 0.1f, 0, 0, BACKWARD, 0, 0, 0.25f, 0,
     NULL},
    /* negative factors: 16-bit gradients whose f A is negative (a vector of none alternates signs) */
    {"fused bf16 sum negative dloss", 64, 4096, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0, 0, 0, FUSED, 0, 0, -2.5f,
     0, NULL},
    {"fused bf16 none signed dloss poly in place", 200, 2048, 0, XENT_BF16, XENT_I64, XENT_REDUCE_NONE, 0, 0, 0, 0,
     FUSED, 1, 0, -0.5f, 0, "VEC=8 TPR=32 BLOCK=256 ITEMS=8 SPLIT=1 PASSES=1 CACHE=0 TILE=0 PERSIST=0 POLY=4"},
    {"backward f16 none signed dloss weights", 100, 3000, 0, XENT_F16, XENT_I32, XENT_REDUCE_NONE, 1, 0, 0, 0, BACKWARD,
     0, 0, -0.5f, 0, NULL},
    {"backward f32 odd rows", 64, 1001, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, BACKWARD, 0, 0, 1.0f, 0,
     NULL},
    {"backward weights smooth", 100, 1000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 1, 0.1f, 0, 0, BACKWARD, 0, 0, 3.0f,
     0, NULL},
    {"backward softcap z", 64, 2000, 0, XENT_F16, XENT_I64, XENT_REDUCE_SUM, 0, 0, 1e-3f, 10.0f, BACKWARD, 1, 0, 1.5f,
     0, NULL},
/* FLAT: the stream's edges (an offset start), rows crossing vectors and
 * tiles, many rows a tile, in place */
#define FL " SPLIT=1 PASSES=1 CACHE=2 TILE=0 PERSIST=0 FLAT=1"
    {"flat f32 in place offset", 300, 50257, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, BACKWARD, 1, 0, 1.5f,
     1, "VEC=4 TPR=256 BLOCK=256 ITEMS=8" FL},
    {"flat bf16 short rows none", 1000, 333, 0, XENT_BF16, XENT_I32, XENT_REDUCE_NONE, 1, 0.1f, 0, 20.0f, BACKWARD, 0,
     0, 0.5f, 3, "VEC=8 TPR=512 BLOCK=512 ITEMS=4" FL},
    {"flat f16 tiny z", 5, 9, 0, XENT_F16, XENT_I64, XENT_REDUCE_SUM, 0, 0, 1e-3f, 0, BACKWARD, 0, 0, 2.0f, 5,
     "VEC=8 TPR=128 BLOCK=128 ITEMS=4" FL},
    {"flat f32 smooth many tiles", 2048, 4099, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0.2f, 0, 0, BACKWARD, 0, 0,
     1.0f, 0, "VEC=4 TPR=128 BLOCK=128 ITEMS=4" FL},
#undef FL
    {"forward z softcap", 100, 3000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0.1f, 1e-3f, 20.0f, FORWARD, 0, 0, 0,
     0, NULL},
    {"rescale mean", 64, 2048, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, RESCALE, 0, 0, 0.3f, 0, NULL},
    {"rescale none", 64, 2048, 0, XENT_BF16, XENT_I64, XENT_REDUCE_NONE, 0, 0, 0, 0, RESCALE, 0, 0, 2.0f, 0, NULL},
    {"rescale by one", 64, 2048, 0, XENT_F32, XENT_I64, XENT_REDUCE_SUM, 0, 0, 0, 0, RESCALE, 0, 0, 1.0f, 0, NULL},
    /* one factor over rows back to back: a stream (its scalar head and tail off 16 bytes);
     * padded rows, or a factor a row: a block a row */
    {"rescale stream f16 offset", 333, 1001, 0, XENT_F16, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, RESCALE, 0, 0, 0.7f,
     3, NULL},
    {"rescale stream tiny", 5, 3, 0, XENT_F32, XENT_I32, XENT_REDUCE_SUM, 0, 0, 0, 0, RESCALE, 0, 0, 2.0f, 1, NULL},
    {"rescale padded rows bf16", 100, 3333, 5, XENT_BF16, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, RESCALE, 0, 0, 0.25f,
     0, NULL},
    {"rescale none f32 padded offset", 50, 999, 3, XENT_F32, XENT_I64, XENT_REDUCE_NONE, 0, 0.1f, 0, 0, RESCALE, 0, 0,
     1.5f, 1, NULL},
    {"shards 2", 100, 5000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, SHARDS, 0, 2, 1.0f, 0, NULL},
    {"shards 3 bf16 smooth z", 64, 10001, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 0, 0.1f, 1e-3f, 0, SHARDS, 0, 3,
     2.0f, 0, NULL},
    {"shards 4 none softcap", 50, 4000, 0, XENT_F32, XENT_I32, XENT_REDUCE_NONE, 0, 0, 0, 15.0f, SHARDS, 0, 4, 0.5f, 0,
     NULL},
};

static struct {
    xent_context *ctx;
    const xent_driver *d;
    uint64_t seed;
} G;

#define CU(call) ck_assert_msg((call) == CUDA_SUCCESS, "%s failed", #call)
#define XE(call)                                                                                                       \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        ck_assert_msg(rc_ == XENT_OK, "%s: %s: %s", #call, xent_errstr(rc_), xent_errmsg(G.ctx));                      \
    } while (0)

static void setup(void) {
    int rc = xent_context_create(&G.ctx, 0);
    ck_assert_msg(rc == XENT_OK, "no GPU context: %s: %s", xent_errstr(rc), xent_errmsg(G.ctx));
    G.d = G.ctx->drv;
    CU(G.d->CtxPushCurrent(G.ctx->cuctx));
}
static void teardown(void) {
    CUcontext c;
    G.d->CtxPopCurrent(&c);
    xent_context_destroy(G.ctx);
}

static size_t esz(xent_dtype d) { return d == XENT_F32 ? 4 : 2; }

static void put_logit(void *buf, xent_dtype d, int64_t k, float v) {
    if (d == XENT_F32)
        ((float *)buf)[k] = v;
    else
        ((uint16_t *)buf)[k] = d == XENT_F16 ? xent_float_to_half(v) : xent_float_to_bf16(v);
}

/* Host inputs of a case. */
typedef struct inputs {
    xent_problem p;
    void *logits, *targets;
    float *weights;
    size_t lbytes, tbytes;
} inputs;

/* masked: even rows take -inf over the second half of their classes (their targets in the
 * first), and every fourth row is also shifted by -300, so that its lse lies far below the
 * range of exp (2^(-lse log2e) overflows fp32) while its -inf classes must still give 0. */
static void make_inputs(const gcase *k, uint64_t seed, int masked, inputs *in) {
    xent_problem_init(&in->p, k->n, k->c);
    in->p.row_stride = k->c + k->pad;
    in->p.logits = k->dt;
    in->p.targets = k->it;
    in->p.reduction = k->red;
    in->p.label_smoothing = k->eps;
    in->p.z_loss = k->z;
    in->p.softcap = k->cap;
    in->p.has_weights = k->weights;
    uint64_t s = seed;
    in->lbytes = (size_t)(k->n * in->p.row_stride + k->offset) * esz(k->dt);
    in->logits = malloc(in->lbytes);
    for (int64_t i = 0; i < k->n * in->p.row_stride + k->offset; i++) {
        float v = (float)(urand(&s) * 10.0 - 5.0) * (k->cap > 0 ? 8.0f : 1.0f);
        const int64_t row = (i - k->offset) / in->p.row_stride, col = (i - k->offset) % in->p.row_stride;
        if (masked && i >= k->offset && row % 2 == 0) {
            if (col >= k->c / 2) v = -INFINITY;
            else if (row % 4 == 0) v -= 300.0f;
        }
        put_logit(in->logits, k->dt, i, v);
    }
    in->tbytes = (size_t)k->n * (k->it == XENT_I64 ? 8 : 4);
    in->targets = malloc(in->tbytes);
    for (int64_t i = 0; i < k->n; i++) {
        const int64_t span = masked && i % 2 == 0 ? k->c / 2 : k->c;
        int64_t t = urand(&s) < 0.1 ? -100 : (int64_t)(urand(&s) * (double)span);
        if (k->it == XENT_I64)
            ((int64_t *)in->targets)[i] = t;
        else
            ((int32_t *)in->targets)[i] = (int32_t)t;
    }
    in->weights = NULL;
    if (k->weights) {
        in->weights = malloc((size_t)k->c * sizeof(float));
        for (int64_t j = 0; j < k->c; j++) in->weights[j] = (float)(0.5 + 1.5 * urand(&s));
    }
}

static CUdeviceptr dev_copy(const void *host, size_t bytes) {
    CUdeviceptr d;
    CU(G.d->MemAlloc(&d, bytes ? bytes : 4));
    if (host)
        CU(G.d->MemcpyHtoD(d, host, bytes));
    else
        CU(G.d->MemsetD8(d, 0xFF, bytes));
    return d;
}

static void *host_copy(CUdeviceptr d, size_t bytes) {
    void *h = malloc(bytes);
    CU(G.d->MemcpyDtoH(h, d, bytes));
    return h;
}

/* Where a gradient is most wrong: the row whose squared error is the largest,
 * and the first and last of its columns that differ from the reference. */
typedef struct worst {
    int64_t row, first, last;
    double d2;
} worst;

/* Norm-wise error of the device gradient against the reference rounded to its
 * dtype, summed as the tuner's check sums it (xent_err_acc); padding and ignored
 * rows checked exactly. */
static double grad_err(const gcase *k, const inputs *in, const void *g, const double *ref, worst *w) {
    xent_err_acc acc = {0};
    const int64_t stride = in->p.row_stride;
    *w = (worst){-1, -1, -1, 0.0};
    /* one assertion a row, not an element: each passing ck_assert records its place through
     * Check's message channel (about 1.5 us), a minute a check of a case of 15M elements */
    for (int64_t i = 0; i < k->n; i++) {
        int64_t t = k->it == XENT_I64 ? ((int64_t *)in->targets)[i] : ((int32_t *)in->targets)[i];
        const double before = acc.d2;
        worst row = {i, -1, -1, 0.0};
        int64_t nonzero = -1, nan_at = -1, pad_at = -1; /* the first such column, if any */
        for (int64_t j = 0; j < k->c; j++) {
            const double v = xent_ref_elem(g, k->dt, k->offset + i * stride + j);
            const double r = xent_ref_round(k->dt, ref[i * k->c + j]);
            if (t == -100 && v != 0.0 && nonzero < 0) nonzero = j;
            if (isnan(v) && nan_at < 0) nan_at = j;
            xent_err_acc_add(&acc, v, r);
            if (v != r) row.first = row.first < 0 ? j : row.first, row.last = j;
        }
        ck_assert_msg(nonzero < 0, "%s: ignored row %lld has gradient %g at column %lld", k->name, (long long)i,
                      nonzero < 0 ? 0.0 : xent_ref_elem(g, k->dt, k->offset + i * stride + nonzero), (long long)nonzero);
        ck_assert_msg(nan_at < 0, "%s: NaN gradient at %lld,%lld", k->name, (long long)i, (long long)nan_at);
        row.d2 = acc.d2 - before;
        if (row.d2 > w->d2) *w = row;
        if (!k->inplace)
            for (int64_t j = k->c; j < stride && pad_at < 0; j++)
                if (((const unsigned char *)g)[(k->offset + i * stride + j) * esz(k->dt)] != 0xFF) pad_at = j;
        ck_assert_msg(pad_at < 0, "%s: padding of row %lld written at column %lld", k->name, (long long)i,
                      (long long)pad_at);
    }
    return xent_err_acc_value(&acc);
}

static int make_plan(const gcase *k, const xent_problem *p, xent_plan **plan) {
    if (!k->config) return xent_plan_get(G.ctx, p, plan);
    xent_config cfg;
    char why[256];
    ck_assert_msg(xent_config_parse(k->config, &cfg, why, sizeof why) == XENT_OK, "%s", why);
    ck_assert_msg(xent_config_fits(&cfg, p, why, sizeof why), "%s: %s", k->name, why);
    return xent_plan_build(G.ctx, p, &cfg, XENT_SOURCE_EXPLICIT, plan);
}

/* Device buffers of one case. */
typedef struct dev {
    CUdeviceptr logits, targets, weights, loss, lse, grad, dloss, stats;
} dev;

static void run_op(const gcase *k, xent_problem p, const dev *d, xent_op op, const float *dl) {
    xent_plan *plan;
    p.op = op;
    /* a case's config is for its training kernels: a backward's forward
     * (xent_fwd, or xent_grad's with z-loss or soft-capping) takes the plan's own */
    int own = op != XENT_OP_RESCALE && !!k->config && k->kind != SHARDS &&
              xent_problem_family(&p) == XENT_FAMILY_GRAD && (k->kind != BACKWARD || op == XENT_OP_BACKWARD);
    XE(own ? make_plan(k, &p, &plan) : xent_plan_get(G.ctx, &p, &plan));
    size_t off = (size_t)k->offset * esz(k->dt);
    xent_args a = {0};
    a.logits = (void *)(d->logits + off);
    a.targets = (void *)d->targets;
    a.weights = p.has_weights ? (float *)d->weights : NULL;
    a.loss = (float *)d->loss;
    a.lse = (p.write_lse || op == XENT_OP_BACKWARD) ? (float *)d->lse : NULL;
    if (op != XENT_OP_FORWARD) a.grad = (void *)((k->inplace ? d->logits : d->grad) + off);
    a.dloss = dl;
    XE(xent_plan_launch(plan, NULL, &a));
    CU(G.d->StreamSynchronize(NULL));
    if (own) xent_plan_destroy(plan);
}

/* The launches of an in-place backward case, each on fresh logits. */
#define INPLACE_LAUNCHES 8

/* The device gradient's error against the reference, asserted within the tuner's tolerance;
 * launch names which of a case's launches wrote it. */
static double check_gradient(const gcase *k, const inputs *in, const dev *d, const double *gref, int launch) {
    void *g = host_copy(k->inplace ? d->logits : d->grad, in->lbytes);
    worst w;
    const double err = grad_err(k, in, g, gref, &w);
    const double tol = tune_grad_tolerance(k->dt, k->kind == RESCALE ? XENT_OP_RESCALE : XENT_OP_FUSED);
    ck_assert_msg(err <= tol,
                  "%s: launch %d: gradient error %.3g > %.1g; the worst row %lld (columns %lld to %lld differ)",
                  k->name, launch + 1, err, tol, (long long)w.row, (long long)w.first, (long long)w.last);
    free(g);
    return err;
}

static size_t nloss(const gcase *k) { return k->red == XENT_REDUCE_NONE ? (size_t)k->n : 1; }

/* Row i's dloss: 1 where the case gives none; for reduction none, 1 to 3 times the case's value, a
 * negative value alternating its sign from row to row. */
static float dloss_of(const gcase *k, int64_t i) {
    if (k->dloss == 0) return 1.0f;
    if (k->red != XENT_REDUCE_NONE) return k->dloss;
    const float f = k->dloss * (float)(1 + i % 3);
    return k->dloss < 0 && i % 2 ? -f : f;
}

static void check_case(const gcase *k, size_t index, int masked) {
    const double t0 = now_s();
    double gerr = -1.0, lerr = -1.0;
    inputs in;
    make_inputs(k, G.seed + (uint64_t)index * 7919, masked, &in);
    const int64_t n = k->n, c = k->c;
    double *lref = malloc(nloss(k) * sizeof(double)), *lseref = malloc(n * sizeof(double));
    double *gref = malloc((size_t)(n * c) * sizeof(double));
    float *hd = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) hd[i] = dloss_of(k, i);
    const void *x0 = (const char *)in.logits + (size_t)k->offset * esz(k->dt); /* what the device reads */
    ck_assert_int_eq(xent_ref_train(&in.p, x0, in.targets, in.weights, hd, lref, lseref, gref, 1), XENT_OK);

    dev d;
    d.logits = dev_copy(in.logits, in.lbytes);
    d.targets = dev_copy(in.targets, in.tbytes);
    d.weights = dev_copy(in.weights, k->weights ? (size_t)c * 4 : 4);
    d.loss = dev_copy(NULL, nloss(k) * 4);
    d.lse = dev_copy(NULL, (size_t)n * 4);
    d.grad = dev_copy(NULL, in.lbytes);
    d.dloss = dev_copy(hd, (size_t)n * 4);
    d.stats = dev_copy(NULL, (size_t)(k->shards ? k->shards : 1) * 2 * n * 4);
    xent_problem p = in.p;
    p.write_lse = 1;
    const float *dl = k->dloss != 0 ? (const float *)d.dloss : NULL;
    if (k->kind == FUSED) {
        run_op(k, p, &d, XENT_OP_FUSED, dl);
        if (k->red != XENT_REDUCE_NONE && !k->inplace) { /* same plan, same inputs: same bits */
            float first;
            CU(G.d->MemcpyDtoH(&first, d.loss, 4));
            run_op(k, p, &d, XENT_OP_FUSED, dl);
            float again;
            CU(G.d->MemcpyDtoH(&again, d.loss, 4));
            ck_assert_msg(!memcmp(&first, &again, 4), "%s: loss %a then %a", k->name, first, again);
        }
    } else if (k->kind == BACKWARD) {
        run_op(k, p, &d, XENT_OP_FORWARD, NULL);
        run_op(k, p, &d, XENT_OP_BACKWARD, dl);
    } else if (k->kind == FORWARD) {
        run_op(k, p, &d, XENT_OP_FORWARD, NULL);
    } else if (k->kind == RESCALE) {
        run_op(k, p, &d, XENT_OP_FUSED, NULL);
        xent_problem r = in.p;
        run_op(k, r, &d, XENT_OP_RESCALE, dl);
    } else {
        int64_t w = (c + k->shards - 1) / k->shards;
        for (int s = 0; s < k->shards; s++) {
            xent_problem sp = in.p;
            sp.class_offset = s * w;
            sp.c = (s + 1) * w < c ? w : c - s * w;
            sp.vocab = c;
            xent_plan *plan;
            sp.op = XENT_OP_FORWARD;
            XE(xent_plan_get(G.ctx, &sp, &plan));
            xent_args a = {0};
            a.logits = (void *)(d.logits + (size_t)(k->offset + s * w) * esz(k->dt));
            a.targets = (void *)d.targets;
            a.stats = (float *)(d.stats + (size_t)s * 2 * n * 4);
            XE(xent_plan_launch(plan, NULL, &a));
        }
        xent_problem cp = in.p;
        cp.op = XENT_OP_COMBINE;
        cp.shards = k->shards;
        cp.write_lse = 1;
        xent_plan *plan;
        XE(xent_plan_get(G.ctx, &cp, &plan));
        xent_args a = {0};
        a.targets = (void *)d.targets;
        a.stats = (float *)d.stats;
        a.loss = (float *)d.loss;
        a.lse = (float *)d.lse;
        XE(xent_plan_launch(plan, NULL, &a));
        for (int s = 0; s < k->shards; s++) {
            xent_problem sp = in.p;
            sp.class_offset = s * w;
            sp.c = (s + 1) * w < c ? w : c - s * w;
            sp.vocab = c;
            sp.op = XENT_OP_BACKWARD;
            XE(xent_plan_get(G.ctx, &sp, &plan));
            xent_args b = {0};
            size_t off = (size_t)(k->offset + s * w) * esz(k->dt);
            b.logits = (void *)(d.logits + off);
            b.grad = (void *)(d.grad + off);
            b.targets = (void *)d.targets;
            b.lse = (float *)d.lse;
            b.dloss = (const float *)d.dloss;
            XE(xent_plan_launch(plan, NULL, &b));
        }
        CU(G.d->StreamSynchronize(NULL));
    }
    if (k->kind != FORWARD) gerr = check_gradient(k, &in, &d, gref, 0);
    /* a race between a row's loads and its in-place stores shows in some launches only: the
     * in-place backward runs again on fresh logits, from the first forward's lse */
    const int launches = k->kind == BACKWARD && k->inplace ? INPLACE_LAUNCHES : 1;
    for (int launch = 1; launch < launches; launch++) {
        CU(G.d->MemcpyHtoD(d.logits, in.logits, in.lbytes));
        run_op(k, p, &d, XENT_OP_BACKWARD, dl);
        gerr = fmax(gerr, check_gradient(k, &in, &d, gref, launch));
    }
    /* a backward's forward too: a wrong gradient then says which kernel erred */
    if (k->kind != RESCALE) {
        float *loss = host_copy(d.loss, nloss(k) * 4);
        lerr = xent_rel_err_vec(loss, lref, (int64_t)nloss(k));
        ck_assert_msg(lerr <= 1e-5, "%s: loss error %.3g (got %g, want %g)", k->name, lerr, loss[0], lref[0]);
        free(loss);
        float *lse = host_copy(d.lse, (size_t)n * 4);
        double e = xent_rel_err_vec(lse, lseref, n);
        ck_assert_msg(e <= 1e-5, "%s: lse error %.3g", k->name, e);
        free(lse);
    }
    /* a case's time is mostly its kernels' compiles where the kernel cache lacks them */
    char gtext[16] = "-", ltext[16] = "-";
    if (gerr >= 0) snprintf(gtext, sizeof gtext, "%.2e", gerr);
    if (lerr >= 0) snprintf(ltext, sizeof ltext, "%.2e", lerr);
    printf("  %-38s gradient error %-9s loss error %-9s %.1f s\n", k->name, gtext, ltext, now_s() - t0);
    CUdeviceptr all[] = {d.logits, d.targets, d.weights, d.loss, d.lse, d.grad, d.dloss, d.stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) G.d->MemFree(all[i]);
    free(in.logits);
    free(in.targets);
    free(in.weights);
    free(lref);
    free(lseref);
    free(gref);
    free(hd);
}

START_TEST(training_ops_match_the_reference) {
    if (test_picked((size_t)_i) && test_selected(cases[_i].name)) check_case(&cases[_i], (size_t)_i, 0);
}
END_TEST

/* -inf logits (make_inputs' masked rows): held chunks, a stash, the plans of both ops. A lane's
 * vectors lie TPR apart, so each of these lanes holds classes of both halves. */
#define MK " PASSES=1 CACHE=0 TILE=0 PERSIST=0"
static const gcase masked_cases[] = {
    {"masked held f32 poly", 200, 4096, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0,
     "VEC=4 TPR=128 BLOCK=128 ITEMS=8 SPLIT=1 POLY=8" MK},
    {"masked held bf16 weights in place", 200, 4096, 0, XENT_BF16, XENT_I64, XENT_REDUCE_SUM, 1, 0, 0, 0, FUSED, 1, 0,
     0, 0, "VEC=8 TPR=128 BLOCK=128 ITEMS=4 SPLIT=1" MK},
    {"masked stash f32 handoff none", 100, 50257, 0, XENT_F32, XENT_I64, XENT_REDUCE_NONE, 0, 0, 0, 0, FUSED, 0, 0,
     0.5f, 0, "VEC=4 TPR=512 BLOCK=512 ITEMS=16 SPLIT=1 STASH=1 PREFETCH=2" MK},
    {"masked plan f16 i32", 300, 1000, 0, XENT_F16, XENT_I32, XENT_REDUCE_MEAN, 0, 0, 0, 0, FUSED, 0, 0, 0, 0, NULL},
    {"masked backward f32", 200, 3000, 0, XENT_F32, XENT_I64, XENT_REDUCE_MEAN, 0, 0, 0, 0, BACKWARD, 0, 0, 1.0f, 0,
     NULL},
};
#undef MK

START_TEST(masked_logits_match_the_reference) {
    const size_t i = sizeof cases / sizeof cases[0] + (size_t)_i; /* picked after the cases above */
    if (test_picked(i) && test_selected(masked_cases[_i].name)) check_case(&masked_cases[_i], i, 1);
}
END_TEST

/* Refusals the launch must give rather than a wrong result. */
START_TEST(bad_arguments_are_refused) {
    xent_problem p;
    xent_problem_init(&p, 4, 100);
    p.op = XENT_OP_BACKWARD;
    xent_plan *plan;
    XE(xent_plan_get(G.ctx, &p, &plan));
    CUdeviceptr b = dev_copy(NULL, 4096);
    xent_args a = {0};
    a.logits = (void *)b;
    a.targets = (void *)b;
    a.grad = (void *)b;
    a.dloss = (const float *)b;
    ck_assert_int_eq(xent_plan_launch(plan, NULL, &a), XENT_EINVAL); /* no lse */
    ck_assert_ptr_nonnull(strstr(xent_errmsg(G.ctx), "lse"));
    a.lse = (float *)b;
    a.grad = (void *)(b + 4);
    ck_assert_int_eq(xent_plan_launch(plan, NULL, &a), XENT_EINVAL); /* another 16-byte phase */
    ck_assert_ptr_nonnull(strstr(xent_errmsg(G.ctx), "phase"));
    G.d->MemFree(b);
}
END_TEST

/* µs per call back to back, median of 7 batches. */
static double time_plan(xent_plan *plan, const xent_args *a, int reps) {
    CUevent e0, e1;
    CU(G.d->EventCreate(&e0, 0));
    CU(G.d->EventCreate(&e1, 0));
    double t[7];
    for (int r = 0; r < 8; r++) {
        CU(G.d->EventRecord(e0, NULL));
        for (int i = 0; i < reps; i++) XE(xent_plan_launch(plan, NULL, a));
        CU(G.d->EventRecord(e1, NULL));
        CU(G.d->EventSynchronize(e1));
        float ms;
        CU(G.d->EventElapsedTime(&ms, e0, e1));
        if (r) t[r - 1] = ms * 1000.0 / reps;
    }
    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) {
                double x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
    G.d->EventDestroy(e0);
    G.d->EventDestroy(e1);
    return t[3];
}

static double time_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, int reps) {
    CUevent e0, e1;
    CU(G.d->EventCreate(&e0, 0));
    CU(G.d->EventCreate(&e1, 0));
    double best = 1e30;
    for (int r = 0; r < 8; r++) {
        CU(G.d->EventRecord(e0, NULL));
        for (int i = 0; i < reps; i++) CU(G.d->MemcpyDtoDAsync(dst, src, bytes, NULL));
        CU(G.d->EventRecord(e1, NULL));
        CU(G.d->EventSynchronize(e1));
        float ms;
        CU(G.d->EventElapsedTime(&ms, e0, e1));
        if (r && ms * 1000.0 / reps < best) best = ms * 1000.0 / reps;
    }
    G.d->EventDestroy(e0);
    G.d->EventDestroy(e1);
    return best;
}

static const struct {
    int64_t n, c;
    xent_dtype dt;
} perf_shapes[] = {
    {32768, 4096, XENT_F32}, {32768, 4096, XENT_BF16}, {16384, 50257, XENT_F32}, {8192, 128256, XENT_BF16}};

/* Fused, backward and rescale plans of the benchmark shapes against a copy of the logits' bytes. */
START_TEST(time_fused_and_backward) {
    const char *cfgs = getenv("XENT_GRAD_CONFIGS"); /* optional: ';'-separated configs to time too */
    int s = _i;
    xent_problem p;
    xent_problem_init(&p, perf_shapes[s].n, perf_shapes[s].c);
    p.logits = perf_shapes[s].dt;
    size_t bytes = (size_t)(p.n * p.c) * esz(p.logits);
    uint64_t seed = 1;
    void *h = malloc(bytes);
    for (size_t i = 0; i < (size_t)(p.n * p.c); i++) put_logit(h, p.logits, (int64_t)i, (float)urand(&seed));
    int64_t *t = malloc((size_t)p.n * 8);
    for (int64_t i = 0; i < p.n; i++) t[i] = (int64_t)(urand(&seed) * (double)p.c);
    dev d = {0};
    d.logits = dev_copy(h, bytes);
    d.targets = dev_copy(t, (size_t)p.n * 8);
    d.grad = dev_copy(NULL, bytes);
    d.loss = dev_copy(NULL, 4);
    d.lse = dev_copy(NULL, (size_t)p.n * 4);
    float one = 1.0f;
    d.dloss = dev_copy(&one, 4);
    int reps = bytes > 1000000000 ? 10 : 40;
    double copy = time_copy(d.grad, d.logits, bytes, reps);
    xent_args a = {0};
    a.logits = (void *)d.logits;
    a.targets = (void *)d.targets;
    a.loss = (float *)d.loss;
    a.grad = (void *)d.grad;
    a.lse = (float *)d.lse;
    a.dloss = (const float *)d.dloss;
    printf("%lldx%lld %s: copy %.1f us (%.2f TB/s)\n", (long long)p.n, (long long)p.c,
           p.logits == XENT_F32 ? "f32" : "bf16", copy, 2.0 * (double)bytes / copy * 1e-6);
    xent_op ops[] = {XENT_OP_FUSED, XENT_OP_BACKWARD};
    for (int o = 0; o < 2; o++) {
        p.op = ops[o];
        p.write_lse = ops[o] == XENT_OP_FUSED ? 0 : 0;
        xent_args b = a;
        if (ops[o] == XENT_OP_FUSED) b.lse = NULL;
        xent_plan *plan;
        XE(xent_plan_get(G.ctx, &p, &plan));
        char desc[512];
        xent_plan_describe(plan, desc, sizeof desc);
        double us = time_plan(plan, &b, reps);
        printf("  %-8s %8.1f us  %.3fx copy  %s\n", o ? "backward" : "fused", us, us / copy, desc);
        for (const char *c = cfgs; c && *c;) {
            char text[256];
            size_t len = strcspn(c, ";");
            snprintf(text, sizeof text, "%.*s", (int)len, c);
            c += len + (c[len] == ';');
            xent_config cfg;
            xent_plan *alt;
            if (xent_config_parse(text, &cfg, NULL, 0) || !xent_config_fits(&cfg, &p, NULL, 0)) continue;
            if (xent_plan_build(G.ctx, &p, &cfg, XENT_SOURCE_EXPLICIT, &alt)) continue;
            us = time_plan(alt, &b, reps);
            printf("  %-8s %8.1f us  %.3fx copy  %s regs=%d grid=%u\n", o ? "backward" : "fused", us, us / copy, text,
                   alt->registers, alt->grid);
            xent_plan_destroy(alt);
        }
    }
    /* The backward of a scaled loss (a GradScaler's, an accumulated step's loss / k): the fused
     * gradient rescaled in place, a read and a write of it as the copy. dloss = -1 flips signs
     * only, so the repetitions keep the values where they were. dloss = 1, the plain
     * loss.backward(): the launch that finds nothing to do. */
    float minus_one = -1.0f;
    CUdeviceptr flip = dev_copy(&minus_one, 4);
    p.op = XENT_OP_RESCALE;
    xent_args r = {0};
    r.logits = r.grad = (void *)d.grad;
    xent_plan *rescale;
    XE(xent_plan_get(G.ctx, &p, &rescale));
    for (int by_one = 0; by_one < 2; by_one++) {
        r.dloss = (const float *)(by_one ? d.dloss : flip);
        double us = time_plan(rescale, &r, reps);
        printf("  %-8s %8.1f us  %.3fx copy  (dloss %d) grid=%u\n", "rescale", us, us / copy, by_one ? 1 : -1,
               rescale->grid);
    }
    CUdeviceptr all[] = {d.logits, d.targets, d.grad, d.loss, d.lse, d.dloss, flip};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) G.d->MemFree(all[i]);
    free(h);
    free(t);
}
END_TEST

int main(void) {
    const char *e = getenv("XENT_TEST_SEED");
    G.seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
    printf("check_grad: XENT_TEST_SEED=%llu\n", (unsigned long long)G.seed);
    test_offset();     /* prints the subset (with test_every) once, before the cases fork */
    test_selected(""); /* print the selection once, before the cases fork */
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, training_ops_match_the_reference, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, masked_logits_match_the_reference, 0,
                        (int)(sizeof masked_cases / sizeof masked_cases[0]));
    tcase_add_test(tc, bad_arguments_are_refused);
    suite_add_tcase(s, tc);
    TCase *perf = tcase_create("perf");
    tcase_add_checked_fixture(perf, setup, teardown);
    tcase_set_timeout(perf, 600);
    tcase_set_tags(perf, "perf");
    tcase_add_loop_test(perf, time_fused_and_backward, 0, (int)(sizeof perf_shapes / sizeof perf_shapes[0]));
    suite_add_tcase(s, perf);
    return run_suite(s);
}
