/* check_grad — the training ops without a GPU: the problem checks of the new
 * fields, the float64 training reference against the forward reference and
 * against finite differences of its own loss, and the xent_grad family's
 * heuristic configs and candidates, each compiled by NVRTC for sm_90 without
 * spills. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/gen.h"
#include "tests/run_suite.h"
#include "tune/reference.h"
#include "tune/tune.h"
#include "xent.h"

/* ---- problem checks: one row a field ---- */

typedef struct bad_case {
    const char *why; /* a word the message must hold */
    void (*set)(xent_problem *p);
} bad_case;

static void op_unknown(xent_problem *p) { p->op = (xent_op)9; }
static void z_negative(xent_problem *p) { p->z_loss = -1.0f; }
static void z_nan(xent_problem *p) { p->z_loss = NAN; }
static void z_weights(xent_problem *p) { p->z_loss = 1e-4f, p->has_weights = 1; }
static void cap_negative(xent_problem *p) { p->softcap = -3.0f; }
static void vocab_small(xent_problem *p) { p->vocab = p->c - 1; }
static void offset_out(xent_problem *p) { p->vocab = p->c + 10, p->class_offset = 11; }
static void offset_alone(xent_problem *p) { p->class_offset = 1; }
static void shard_weights(xent_problem *p) { p->vocab = 2 * p->c, p->has_weights = 1; }
static void shard_fused(xent_problem *p) { p->vocab = 2 * p->c, p->op = XENT_OP_FUSED; }
static void combine_zero(xent_problem *p) { p->op = XENT_OP_COMBINE; }
static void shards_stray(xent_problem *p) { p->shards = 2; }

static const bad_case bad[] = {
    {"op", op_unknown},           {"z_loss", z_negative},         {"z_loss", z_nan},
    {"weights", z_weights},       {"softcap", cap_negative},      {"vocab", vocab_small},
    {"class_offset", offset_out}, {"class_offset", offset_alone}, {"weights", shard_weights},
    {"shard", shard_fused},       {"shards", combine_zero},       {"shards", shards_stray},
};

START_TEST(bad_training_fields_are_refused) {
    xent_problem p;
    xent_problem_init(&p, 8, 100);
    bad[_i].set(&p);
    char why[256] = "";
    ck_assert_int_eq(xent_problem_check(&p, why, sizeof why), XENT_EINVAL);
    ck_assert_msg(strstr(why, bad[_i].why), "case %d: '%s' lacks '%s'", _i, why, bad[_i].why);
}
END_TEST

START_TEST(good_training_fields_pass) {
    xent_problem p;
    xent_problem_init(&p, 8, 100);
    p.op = XENT_OP_FUSED, p.z_loss = 1e-4f, p.softcap = 30.0f;
    ck_assert_int_eq(xent_problem_check(&p, NULL, 0), XENT_OK);
    xent_problem_init(&p, 8, 100);
    p.vocab = 1000, p.class_offset = 900, p.op = XENT_OP_BACKWARD;
    ck_assert_int_eq(xent_problem_check(&p, NULL, 0), XENT_OK);
    xent_problem_init(&p, 8, 1000);
    p.op = XENT_OP_COMBINE, p.shards = 4;
    ck_assert_int_eq(xent_problem_check(&p, NULL, 0), XENT_OK);
}
END_TEST

/* ---- the reference ---- */

typedef struct ref_case {
    int64_t n, c;
    xent_reduction red;
    int weights;
    float eps, z, cap;
} ref_case;

static const ref_case refs[] = {
    {5, 7, XENT_REDUCE_MEAN, 0, 0, 0, 0},
    {4, 9, XENT_REDUCE_SUM, 1, 0, 0, 0},
    {6, 5, XENT_REDUCE_NONE, 0, 0.2f, 0, 0},
    {3, 8, XENT_REDUCE_MEAN, 1, 0.1f, 0, 0},
    {4, 6, XENT_REDUCE_MEAN, 0, 0, 0.01f, 0},
    {5, 6, XENT_REDUCE_SUM, 0, 0, 0, 2.0f},
    {4, 11, XENT_REDUCE_MEAN, 0, 0.1f, 0.02f, 3.0f},
};

typedef struct ref_inputs {
    xent_problem p;
    float x[128];
    int64_t t[16];
    float w[16];
    float dloss[16];
} ref_inputs;

static void ref_make(const ref_case *k, ref_inputs *r) {
    xent_problem_init(&r->p, k->n, k->c);
    r->p.reduction = k->red;
    r->p.has_weights = k->weights;
    r->p.label_smoothing = k->eps;
    r->p.z_loss = k->z;
    r->p.softcap = k->cap;
    unsigned s = 12345;
    for (int i = 0; i < k->n * k->c; i++) r->x[i] = (float)((s = s * 1103515245u + 12345u) % 1000) / 250.0f - 2.0f;
    for (int i = 0; i < k->n; i++) r->t[i] = i == 1 ? -100 : (i * 3) % k->c;
    for (int j = 0; j < k->c; j++) r->w[j] = 0.5f + 0.1f * (float)j;
    for (int i = 0; i < k->n; i++) r->dloss[i] = k->red == XENT_REDUCE_NONE ? 1.0f + 0.5f * (float)i : 1.5f;
}

/* The summed loss, weighted by dloss the way the gradient is. */
static double ref_objective(ref_inputs *r) {
    double loss[16];
    ck_assert_int_eq(xent_ref_train(&r->p, r->x, r->t, r->p.has_weights ? r->w : NULL, NULL, loss, NULL, NULL, 1),
                     XENT_OK);
    if (r->p.reduction != XENT_REDUCE_NONE) return r->dloss[0] * loss[0];
    double s = 0;
    for (int i = 0; i < r->p.n; i++) s += r->dloss[i] * loss[i];
    return s;
}

START_TEST(reference_gradient_is_the_derivative) {
    ref_inputs r;
    ref_make(&refs[_i], &r);
    double loss[16], g[128];
    ck_assert_int_eq(xent_ref_train(&r.p, r.x, r.t, r.p.has_weights ? r.w : NULL, r.dloss, loss, NULL, g, 1), XENT_OK);
    for (int k = 0; k < r.p.n * r.p.c; k++) {
        const float h = 1.0f / 64.0f, x0 = r.x[k]; /* exact in fp32 on both sides */
        r.x[k] = x0 + h;
        double up = ref_objective(&r);
        r.x[k] = x0 - h;
        double down = ref_objective(&r);
        r.x[k] = x0;
        double fd = (up - down) / (2.0 * h);
        ck_assert_msg(fabs(fd - g[k]) <= 2e-3 * (fabs(g[k]) + 1e-2), "case %d element %d: %g, differences %g", _i, k,
                      g[k], fd);
    }
}
END_TEST

START_TEST(reference_loss_matches_the_forward_reference) {
    ref_inputs r;
    ref_make(&refs[_i], &r);
    if (r.p.z_loss > 0 || r.p.softcap > 0) return; /* the forward reference has neither */
    double a[16], b[16], la[16], lb[16];
    const float *w = r.p.has_weights ? r.w : NULL;
    ck_assert_int_eq(xent_ref_train(&r.p, r.x, r.t, w, NULL, a, la, NULL, 1), XENT_OK);
    ck_assert_int_eq(xent_ref_forward(&r.p, r.x, r.t, w, b, lb, NULL), XENT_OK);
    for (int i = 0; i < (r.p.reduction == XENT_REDUCE_NONE ? r.p.n : 1); i++)
        ck_assert_msg(fabs(a[i] - b[i]) <= 1e-12 * (fabs(b[i]) + 1), "case %d row %d: %g vs %g", _i, i, a[i], b[i]);
    for (int i = 0; i < r.p.n; i++) ck_assert(fabs(la[i] - lb[i]) <= 1e-12 * (fabs(lb[i]) + 1));
}
END_TEST

/* Past a million elements the rows are spread over threads in chunks: every
 * row's loss, lse and gradient land where the one-chunk path puts them, and a
 * sum is the same bits run after run. */
START_TEST(reference_threaded_rows_land_in_place) {
    enum { N = 1200, C = 1000, STEP = 7 };
    float *x = malloc(sizeof(float) * N * C);
    int64_t *t = malloc(sizeof(int64_t) * N);
    double *none = malloc(sizeof(double) * N), *lse = malloc(sizeof(double) * N), *flse = malloc(sizeof(double) * N);
    double *fnone = malloc(sizeof(double) * N), *g = malloc(sizeof(double) * (N / STEP + 1) * C);
    double *g1 = malloc(sizeof(double) * N * C);
    ck_assert(x && t && none && lse && flse && fnone && g && g1);
    unsigned s = 7;
    for (int i = 0; i < N * C; i++) x[i] = (float)((s = s * 1103515245u + 12345u) % 4096) / 512.0f - 4.0f;
    for (int i = 0; i < N; i++) t[i] = i % 11 == 5 ? -100 : (i * 37) % C;
    xent_problem p;
    xent_problem_init(&p, N, C);
    p.reduction = XENT_REDUCE_NONE;
    ck_assert_int_eq(xent_ref_train(&p, x, t, NULL, NULL, none, lse, g, STEP), XENT_OK);
    ck_assert_int_eq(xent_ref_train(&p, x, t, NULL, NULL, fnone, flse, g1, 1), XENT_OK);
    ck_assert(memcmp(none, fnone, sizeof(double) * N) == 0 && memcmp(lse, flse, sizeof(double) * N) == 0);
    for (int i = 0; i < N; i += STEP)
        ck_assert_msg(memcmp(g + (size_t)(i / STEP) * C, g1 + (size_t)i * C, sizeof(double) * C) == 0, "row %d", i);
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, fnone, flse, NULL), XENT_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fabs(none[i] - fnone[i]) <= 1e-12 * (fabs(fnone[i]) + 1), "row %d loss", i);
        ck_assert_msg(fabs(lse[i] - flse[i]) <= 1e-12 * (fabs(flse[i]) + 1), "row %d lse", i);
    }
    double sum = 0.0, a, b;
    for (int i = 0; i < N; i++) sum += none[i];
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_train(&p, x, t, NULL, NULL, &a, NULL, NULL, 1), XENT_OK);
    ck_assert_int_eq(xent_ref_train(&p, x, t, NULL, NULL, &b, NULL, NULL, 1), XENT_OK);
    ck_assert(memcmp(&a, &b, sizeof a) == 0);
    ck_assert_msg(fabs(a - sum) <= 1e-12 * fabs(sum), "sum %.17g against the rows' %.17g", a, sum);
    free(x), free(t), free(none), free(lse), free(flse), free(fnone), free(g), free(g1);
}
END_TEST

/* ---- configs: the heuristic fits, candidates exist, kernels compile ---- */

typedef struct prob_case {
    int64_t n, c;
    xent_dtype dt;
    xent_op op;
    int weights;
    float eps, z, cap;
    int64_t vocab, offset;
    int shards;
    int evict; /* the heuristic's EVICT: fused rows read twice (past a chunk, their stash too large) */
    int stash; /* the heuristic's STASH (and the handoff, PREFETCH=2): fused rows past a chunk */
    int poly;  /* the candidates offer POLY: fused fp32 rows held in registers (or a cluster's) */
} prob_case;

static const prob_case probs[] = {
    {32768, 4096, XENT_F32, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {32768, 4096, XENT_BF16, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {16384, 50257, XENT_F32, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1},
    {8192, 128256, XENT_BF16, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {2048, 256000, XENT_BF16, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}, /* held by a cluster's stashes */
    {1024, 256000, XENT_F32, XENT_OP_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, /* by four blocks' */
    {8, 1000000, XENT_F32, XENT_OP_FUSED, 0, 0.1f, 0, 0, 0, 0, 0, 1, 0, 0},
    {1048576, 10, XENT_F16, XENT_OP_FUSED, 1, 0.1f, 0, 0, 0, 0, 0, 0, 0, 0},
    {4096, 32000, XENT_BF16, XENT_OP_BACKWARD, 0, 0, 1e-4f, 30.0f, 0, 0, 0, 0, 0, 0},
    {4096, 32000, XENT_F16, XENT_OP_FORWARD, 0, 0.1f, 1e-4f, 0, 0, 0, 0, 0, 0, 0},
    {4096, 16000, XENT_BF16, XENT_OP_FORWARD, 0, 0.1f, 0, 0, 64000, 16000, 0, 0, 0, 0},
    {4096, 16000, XENT_BF16, XENT_OP_BACKWARD, 0, 0.1f, 1e-4f, 0, 64000, 48000, 0, 0, 0, 0},
    {4096, 64000, XENT_F32, XENT_OP_COMBINE, 0, 0, 1e-4f, 0, 0, 0, 4, 0, 0, 0},
    {4096, 64000, XENT_BF16, XENT_OP_RESCALE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

static void prob_make(const prob_case *k, xent_problem *p) {
    xent_problem_init(p, k->n, k->c);
    p->logits = k->dt, p->op = k->op, p->has_weights = k->weights, p->label_smoothing = k->eps;
    p->z_loss = k->z, p->softcap = k->cap, p->vocab = k->vocab, p->class_offset = k->offset, p->shards = k->shards;
    ck_assert_int_eq(xent_problem_check(p, NULL, 0), XENT_OK);
}

START_TEST(grad_heuristic_fits_and_compiles) {
    xent_problem p;
    prob_make(&probs[_i], &p);
    ck_assert_int_eq(xent_problem_family(&p), XENT_FAMILY_GRAD);
    xent_config cfg;
    char why[256] = "", text[256];
    xent_config_heuristic(&p, 132, &cfg);
    xent_config_format(&cfg, text, sizeof text);
    ck_assert_msg(xent_config_fits(&cfg, &p, why, sizeof why), "%s: %s", text, why);
    ck_assert_msg(cfg.evict == probs[_i].evict, "%s: EVICT=%d, want %d", text, cfg.evict, probs[_i].evict);
    ck_assert_msg(cfg.stash == probs[_i].stash, "%s: STASH=%d, want %d", text, cfg.stash, probs[_i].stash);
    ck_assert_msg((cfg.prefetch == 2) == cfg.stash, "%s: the handoff without the stash, or the reverse", text);
    xent_cubin bin;
    char err[4096];
    int rc = xent_kernel_get(&cfg, &p, 90, &bin, err, sizeof err);
    ck_assert_msg(rc == XENT_OK, "%s: %s", text, err);
    ck_assert_msg(bin.spill_bytes == 0, "%s: %d bytes spilled", text, bin.spill_bytes);
    xent_cubin_free(&bin);
    char *src = xent_render(&cfg, &p);
    ck_assert_ptr_nonnull(strstr(src, "xent_grad.cu"));
    free(src);
}
END_TEST

START_TEST(grad_candidates_are_legal_and_few) {
    xent_problem p;
    prob_make(&probs[_i], &p);
    if (p.op == XENT_OP_COMBINE || p.op == XENT_OP_RESCALE) return; /* fixed kernels */
    size_t n = xent_space_enumerate(p.logits, &p, 132, NULL, 0), polys = 0;
    ck_assert_msg(n > 0 && n < 400, "%zu candidates", n);
    xent_config *all = calloc(n, sizeof *all);
    xent_space_enumerate(p.logits, &p, 132, all, n);
    for (size_t i = 0; i < n; i++) polys += all[i].poly != 0;
    ck_assert_msg((polys > 0) == probs[_i].poly, "%zu of %zu candidates take POLY", polys, n);
    /* the space holds the heuristic's plan: a tune starts from what the lookup would run */
    xent_config h;
    char want[256];
    xent_config_heuristic(&p, 132, &h);
    xent_config_format(&h, want, sizeof want);
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) found = !memcmp(&all[i], &h, sizeof h);
    ck_assert_msg(found, "the heuristic's %s is not a candidate", want);
    for (size_t i = 0; i < n; i++) {
        char why[256];
        ck_assert_msg(xent_config_fits(&all[i], &p, why, sizeof why), "%s", why);
        ck_assert_int_le(all[i].split, 8);
        ck_assert_msg(all[i].prefetch != 2 || all[i].stash, "the handoff offered to a row not stashed");
    }
    free(all);
}
END_TEST

/* The grad family refuses the fwd family's knobs and clusters past 8. */
static const struct {
    const char *cfg;
    int ok;
    const char *why;
} legal[] = {
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=8 PERSIST=0", 1, ""},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 0, "PASSES"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=16 PERSIST=0", 0, "cluster"},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=0", 0, "TPR == BLOCK"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 1, ""},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=32 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 0, "registers"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 0, "PERSIST"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 STASH=1", 1, ""},
    {"VEC=4 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 STASH=1", 0, "STASH"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=1 STASH=1", 0, "STASH"},
    /* the handoff holds one chunk: any chunk a thread holds, and a stash */
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=1", 0, "two chunks"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=2 STASH=1", 1, ""},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=2 FLAT=1", 0, "FLAT"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0 FLAT=1", 1, ""},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 FLAT=1", 0, "FLAT"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 EVICT=1 FLAT=1", 0, "FLAT"},
    {"VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=0 FLAT=1", 0, "FLAT"},
};

/* FLAT fits the backward of rows back to back, of at least VEC classes, so
 * short that a tile crosses no more rows than the block has threads. */
static const struct {
    int64_t c, stride;
    xent_dtype dt;
    xent_op op;
    const char *cfg;
    const char *why; /* "" where it fits */
} flats[] = {
    {50257, 0, XENT_F32, XENT_OP_BACKWARD, "VEC=4 TPR=256 BLOCK=256 ITEMS=8", ""},
    {50257, 50257, XENT_BF16, XENT_OP_BACKWARD, "VEC=8 TPR=512 BLOCK=512 ITEMS=4", ""},
    {50257, 50260, XENT_F32, XENT_OP_BACKWARD, "VEC=4 TPR=256 BLOCK=256 ITEMS=8", "back to back"},
    {50257, 0, XENT_F32, XENT_OP_FUSED, "VEC=4 TPR=256 BLOCK=256 ITEMS=8", "backward"},
    {6, 0, XENT_BF16, XENT_OP_BACKWARD, "VEC=8 TPR=128 BLOCK=128 ITEMS=4", "VEC classes"},
    {40, 0, XENT_F32, XENT_OP_BACKWARD, "VEC=4 TPR=256 BLOCK=256 ITEMS=8", ""},     /* 207 rows a tile */
    {30, 0, XENT_F32, XENT_OP_BACKWARD, "VEC=4 TPR=256 BLOCK=256 ITEMS=8", "rows"}, /* 275 */
};
/* ... and never more rows than the problem has */
START_TEST(grad_flat_fits_few_rows) {
    xent_problem p;
    xent_problem_init(&p, 5, 9);
    p.logits = XENT_F16, p.op = XENT_OP_BACKWARD;
    xent_config c;
    char why[256] = "";
    ck_assert_int_eq(
        xent_config_parse("VEC=8 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 FLAT=1", &c, why,
                          sizeof why),
        XENT_OK);
    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why), "%s", why);
    p.n = 200;
    ck_assert(!xent_config_fits(&c, &p, why, sizeof why));
}
END_TEST

START_TEST(grad_flat_fits) {
    xent_problem p;
    xent_problem_init(&p, 4096, flats[_i].c);
    p.logits = flats[_i].dt, p.op = flats[_i].op, p.row_stride = flats[_i].stride;
    xent_config c;
    char text[256], why[256] = "";
    snprintf(text, sizeof text, "%s PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 FLAT=1", flats[_i].cfg);
    ck_assert_int_eq(xent_config_parse(text, &c, why, sizeof why), XENT_OK);
    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why) == !flats[_i].why[0], "%s: %s", text, why);
    if (flats[_i].why[0]) ck_assert_msg(strstr(why, flats[_i].why), "'%s' lacks '%s'", why, flats[_i].why);
    /* a flat config of another shape answers whatever it fits: it holds no row */
    ck_assert_int_eq(xent_config_carries(&c, 4096, &p), 1);
}
END_TEST

/* STASH fits fused rows whose part past the first chunk fits a block's
 * shared memory (a held row stashes nothing), and sizes the launch's dynamic
 * shared memory to it. */
static const struct {
    int64_t c;
    xent_dtype dt;
    xent_op op;
    const char *cfg;
    int fits;
    size_t smem;
} stashes[] = {
    {50257, XENT_F32, XENT_OP_FUSED, "VEC=4 TPR=512 BLOCK=512 ITEMS=16", 1, (12564 - 8192) * 16},
    {128256, XENT_BF16, XENT_OP_FUSED, "VEC=8 TPR=512 BLOCK=512 ITEMS=16", 1, (16032 - 8192) * 16},
    {128256, XENT_BF16, XENT_OP_FUSED, "VEC=8 TPR=256 BLOCK=256 ITEMS=16 SPLIT=2", 1, (8016 - 4096) * 16},
    {4096, XENT_F32, XENT_OP_FUSED, "VEC=4 TPR=128 BLOCK=128 ITEMS=8", 1, 0},
    {50257, XENT_F32, XENT_OP_BACKWARD, "VEC=4 TPR=512 BLOCK=512 ITEMS=16", 0, 0}, /* one read already */
    {128256, XENT_F32, XENT_OP_FUSED, "VEC=4 TPR=256 BLOCK=256 ITEMS=4", 0, 0},    /* 497 KB: too big */
};

START_TEST(grad_stash_fits) {
    xent_problem p;
    xent_problem_init(&p, 4096, stashes[_i].c);
    p.logits = stashes[_i].dt, p.op = stashes[_i].op;
    xent_config c;
    char text[256], why[256] = "";
    snprintf(text, sizeof text, "%s PASSES=1 CACHE=0 TILE=0%s PERSIST=0 STASH=1", stashes[_i].cfg,
             strstr(stashes[_i].cfg, "SPLIT") ? "" : " SPLIT=1");
    ck_assert_int_eq(xent_config_parse(text, &c, why, sizeof why), XENT_OK);
    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why) == stashes[_i].fits, "%s: %s", text, why);
    if (stashes[_i].fits) {
        ck_assert_uint_eq(xent_config_smem(&c, &p), stashes[_i].smem);
        ck_assert_int_eq(xent_config_reads_twice(&c, &p), 0);
    } else {
        ck_assert_msg(strstr(why, "STASH"), "'%s' lacks 'STASH'", why);
    }
}
END_TEST

/* Clusters (xent_grad SPLIT > 1) need sm_90: refused below it, and left out
 * of the space enumerated for it; the forward's split rows take no cluster. */
static const struct {
    xent_op op;
    int split, arch, fits;
} arch_cases[] = {
    {XENT_OP_FUSED, 4, 80, 0}, {XENT_OP_FUSED, 4, 89, 0},    {XENT_OP_FUSED, 4, 90, 1},
    {XENT_OP_FUSED, 1, 80, 1}, {XENT_OP_BACKWARD, 8, 86, 0}, {XENT_OP_FORWARD, 32, 80, 1},
};

START_TEST(grad_clusters_need_sm90) {
    xent_problem p;
    xent_problem_init(&p, 8, 1000000);
    p.op = arch_cases[_i].op;
    xent_config c;
    char text[160], why[256] = "";
    snprintf(text, sizeof text, "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=%d PERSIST=%d",
             arch_cases[_i].split, p.op == XENT_OP_FORWARD ? 1 : 0);
    ck_assert_int_eq(xent_config_parse(text, &c, why, sizeof why), XENT_OK);
    ck_assert_int_eq(xent_config_arch_fits(&c, &p, arch_cases[_i].arch, why, sizeof why), arch_cases[_i].fits);
    if (!arch_cases[_i].fits) ck_assert_msg(strstr(why, "sm_90"), "'%s' lacks 'sm_90'", why);
    if (p.op == XENT_OP_FORWARD) return;
    size_t n = xent_space_enumerate(p.logits, &p, 132, NULL, 0);
    xent_config *all = calloc(n, sizeof *all);
    xent_space_enumerate(p.logits, &p, 132, all, n);
    size_t clusters = 0;
    for (size_t i = 0; i < n; i++) clusters += all[i].split > 1;
    if (p.op == XENT_OP_FUSED) ck_assert_uint_gt(clusters, 0); /* rows past what a block holds */
    size_t kept = xent_space_for_arch(all, n, &p, arch_cases[_i].arch);
    ck_assert_uint_eq(kept, arch_cases[_i].arch >= 90 ? n : n - clusters);
    for (size_t i = 0; i < kept; i++) ck_assert(arch_cases[_i].arch >= 90 || all[i].split == 1);
    free(all);
}
END_TEST

/* A launch's shared memory must fit what a block of the architecture may
 * have: the 125 KB stash of 8192x128256 bf16 on sm_80 and sm_90, not sm_89;
 * a lookup's or the heuristic's stash gives way to a second read there. */
static const struct {
    int arch;
    size_t smem;
    int fits;
} smem_cases[] = {{80, 163 * 1024, 1}, {86, 99 * 1024, 0},   {89, 99 * 1024, 0},
                  {90, 227 * 1024, 1}, {100, 227 * 1024, 1}, {120, 99 * 1024, 0}};

/* 8192 fused bf16 rows of c classes, and the shipped plan of 8192x128256: a
 * 512-thread block a row, the chunks past the first stashed, the handoff. */
static void stashed_plan(int64_t c, xent_problem *p, xent_config *cfg) {
    xent_problem_init(p, 8192, c);
    p->logits = XENT_BF16, p->op = XENT_OP_FUSED;
    char why[256] = "";
    ck_assert_int_eq(xent_config_parse("VEC=8 TPR=512 BLOCK=512 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 "
                                       "STASH=1 PREFETCH=2",
                                       cfg, why, sizeof why),
                     XENT_OK);
}

START_TEST(grad_stash_needs_shared_memory) {
    ck_assert_uint_eq(xent_arch_smem(smem_cases[_i].arch), smem_cases[_i].smem);
    xent_problem p;
    xent_config c;
    char why[256] = "";
    stashed_plan(128256, &p, &c);
    ck_assert_int_eq(xent_config_arch_fits(&c, &p, smem_cases[_i].arch, why, sizeof why), smem_cases[_i].fits);
    if (!smem_cases[_i].fits) ck_assert_msg(strstr(why, "STASH needs"), "'%s' lacks 'STASH needs'", why);
    const char *what = xent_config_for_arch(&c, &p, smem_cases[_i].arch);
    ck_assert_int_eq(*what != 0, !smem_cases[_i].fits); /* the plan's note says what it took */
    ck_assert_int_eq(c.stash, smem_cases[_i].fits);
    ck_assert_int_eq(c.evict, !smem_cases[_i].fits); /* read twice: L2 priorities */
    ck_assert_int_eq(c.prefetch, smem_cases[_i].fits ? 2 : 0); /* the handoff goes with the stash */
    ck_assert(xent_config_arch_fits(&c, &p, smem_cases[_i].arch, NULL, 0));
}
END_TEST

/* Turing (sm_75) lacks PTX's packed 16-bit conversions and L2 cache
 * policies: xent_grad's kernels of 16-bit logits are refused there, and
 * EVICT, a hint, is dropped from a lookup's config and refused in a given one. */
static const struct {
    xent_dtype d;
    int arch, evict;
    const char *why; /* NULL: fits */
} turing_cases[] = {
    {XENT_F32, 75, 1, "EVICT"},   {XENT_F32, 75, 0, NULL},  {XENT_F16, 75, 0, "16-bit"},
    {XENT_BF16, 75, 0, "16-bit"}, {XENT_BF16, 80, 1, NULL}, {XENT_F32, 80, 1, NULL},
};

START_TEST(grad_turing) {
    xent_problem p;
    xent_problem_init(&p, 16384, 50257);
    p.logits = turing_cases[_i].d, p.op = XENT_OP_FUSED;
    xent_config c;
    char text[160], why[256] = "";
    snprintf(text, sizeof text, "VEC=%d TPR=512 BLOCK=512 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 EVICT=%d",
             p.logits == XENT_F32 ? 4 : 8, turing_cases[_i].evict);
    ck_assert_int_eq(xent_config_parse(text, &c, why, sizeof why), XENT_OK);
    const int fits = xent_config_arch_fits(&c, &p, turing_cases[_i].arch, why, sizeof why);
    ck_assert_int_eq(fits, turing_cases[_i].why == NULL);
    if (!fits) ck_assert_msg(strstr(why, turing_cases[_i].why), "'%s' lacks '%s'", why, turing_cases[_i].why);
    xent_config_for_arch(&c, &p, turing_cases[_i].arch);
    ck_assert_int_eq(c.evict, turing_cases[_i].arch >= 80 && turing_cases[_i].evict);
    if (p.logits == XENT_F32) ck_assert(xent_config_arch_fits(&c, &p, turing_cases[_i].arch, NULL, 0));
}
END_TEST

/* PREFETCH=2 hands the next row to a gradient's stores: the fused kernel's
 * and the backward's, not the training family's forward (z-loss here). */
static const struct {
    xent_op op;
    int fits;
} handoffs[] = {{XENT_OP_FUSED, 1}, {XENT_OP_BACKWARD, 1}, {XENT_OP_FORWARD, 0}};

/* A stashed entry's handoff, fitted to rows of another length: kept where the
 * rows still stash, dropped where the entry's kernel would hold them. */
static const struct {
    int64_t c;
    int prefetch;
} handoff_rows[] = {{128256, 2}, {100000, 2}, {50257, 0}, {4096, 0}};

START_TEST(grad_handoff_fitted_to_rows) {
    xent_problem p;
    xent_config c;
    char why[256] = "";
    stashed_plan(handoff_rows[_i].c, &p, &c);
    xent_config_fit_rows(&c, 8192, &p, 132);
    ck_assert_int_eq(c.prefetch, handoff_rows[_i].prefetch);
    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why), "%s", why);
}
END_TEST

START_TEST(grad_handoff_fits) {
    xent_problem p;
    xent_problem_init(&p, 4096, 4096);
    p.op = handoffs[_i].op, p.z_loss = 1e-4f;
    xent_config c;
    char why[256] = "";
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 "
                                       "PREFETCH=2",
                                       &c, why, sizeof why),
                     XENT_OK);
    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why) == handoffs[_i].fits, "op %d: %s", p.op, why);
    if (!handoffs[_i].fits) ck_assert_msg(strstr(why, "PREFETCH=2"), "'%s' lacks 'PREFETCH=2'", why);
}
END_TEST

START_TEST(grad_legality) {
    xent_config c;
    char why[256] = "";
    ck_assert_int_eq(xent_config_parse(legal[_i].cfg, &c, why, sizeof why), XENT_OK);
    ck_assert_int_eq(xent_config_legal_for(&c, XENT_FAMILY_GRAD, XENT_F32, why, sizeof why), legal[_i].ok);
    if (!legal[_i].ok) ck_assert_msg(strstr(why, legal[_i].why), "'%s' lacks '%s'", why, legal[_i].why);
}
END_TEST

/* The heuristic's team and chunk: fused 16-bit rows held 128 logits a lane
 * by teams of at least a warp (256 threads and a stash where two blocks fit
 * an SM), fp32 32 a lane by teams of at least 64; rows past 512 threads read
 * twice in 256-byte chunks; the backward 32 a lane, or flat where fp32 rows
 * start off a 16-byte boundary. POLY=8 where a fused fp32 row is held 32 logits a
 * lane or more. */
static const struct {
    int64_t c;
    xent_dtype dt;
    xent_op op;
    int tpr, block, items, poly, flat;
} shapes[] = {
    {4096, XENT_F32, XENT_OP_FUSED, 128, 128, 8, 8, 0},       {4096, XENT_BF16, XENT_OP_FUSED, 32, 128, 16, 0, 0},
    {4096, XENT_F16, XENT_OP_FUSED, 32, 128, 16, 0, 0},       {4096, XENT_BF16, XENT_OP_BACKWARD, 128, 128, 4, 0, 0},
    {1000, XENT_F32, XENT_OP_FUSED, 64, 64, 4, 0, 0},         {1000, XENT_BF16, XENT_OP_FUSED, 32, 128, 4, 0, 0},
    {32000, XENT_BF16, XENT_OP_FUSED, 256, 256, 16, 0, 0},    {128256, XENT_BF16, XENT_OP_FUSED, 512, 512, 16, 0, 0},
    {50257, XENT_F32, XENT_OP_FUSED, 512, 512, 16, 0, 0},     {50257, XENT_F32, XENT_OP_BACKWARD, 128, 128, 8, 0, 1},
    {50257, XENT_BF16, XENT_OP_FUSED, 256, 256, 16, 0, 0},    {4096, XENT_F32, XENT_OP_BACKWARD, 128, 128, 8, 0, 0},
    {128256, XENT_BF16, XENT_OP_BACKWARD, 512, 512, 8, 0, 0}, {50257, XENT_BF16, XENT_OP_BACKWARD, 512, 512, 8, 0, 0},
    {1001, XENT_F32, XENT_OP_BACKWARD, 128, 128, 8, 0, 1},
};

START_TEST(grad_heuristic_shapes) {
    xent_problem p;
    xent_problem_init(&p, 4096, shapes[_i].c);
    p.logits = shapes[_i].dt, p.op = shapes[_i].op;
    xent_config cfg;
    char text[256];
    xent_config_heuristic(&p, 132, &cfg);
    xent_config_format(&cfg, text, sizeof text);
    ck_assert_msg(cfg.tpr == shapes[_i].tpr && cfg.block == shapes[_i].block && cfg.items == shapes[_i].items &&
                      cfg.poly == shapes[_i].poly && cfg.flat == shapes[_i].flat,
                  "c=%lld: %s, want TPR=%d BLOCK=%d ITEMS=%d POLY=%d FLAT=%d", (long long)shapes[_i].c, text,
                  shapes[_i].tpr, shapes[_i].block, shapes[_i].items, shapes[_i].poly, shapes[_i].flat);
}
END_TEST

/* Fused rows that neither a block's registers nor its stash hold: the fewest
 * 512-thread blocks of a cluster of at most 2048 threads whose registers and
 * stashes hold them (SPLIT), on sm_90; read twice with L2 priorities where no
 * such cluster holds them, and on GPUs without clusters, whose blocks cannot
 * stash a whole row. */
static const struct {
    int64_t c;
    xent_dtype dt;
    int arch, split, evict, stash, tpr;
} long_rows[] = {
    {256000, XENT_BF16, 90, 2, 0, 1, 512},  {128256, XENT_F32, 90, 2, 0, 1, 512},  {256000, XENT_F32, 90, 4, 0, 1, 512},
    {151936, XENT_F32, 90, 2, 0, 1, 512},   {200064, XENT_F16, 90, 2, 0, 1, 512},  {400000, XENT_F16, 90, 4, 0, 1, 512},
    {1000000, XENT_BF16, 90, 1, 1, 0, 512}, {400000, XENT_F32, 90, 1, 1, 0, 512},  {128256, XENT_BF16, 90, 1, 0, 1, 512},
    {50257, XENT_F32, 90, 1, 0, 1, 512},    {256000, XENT_BF16, 80, 1, 1, 0, 512}, {128256, XENT_F32, 89, 1, 1, 0, 512},
    {128256, XENT_F32, 80, 1, 1, 0, 512},
};

START_TEST(grad_heuristic_holds_long_rows_in_a_cluster) {
    xent_problem p;
    xent_problem_init(&p, 8192, long_rows[_i].c);
    p.logits = long_rows[_i].dt, p.op = XENT_OP_FUSED;
    xent_config cfg;
    char text[256], why[256] = "";
    xent_config_heuristic(&p, 132, &cfg);
    const char *what = xent_config_for_arch(&cfg, &p, long_rows[_i].arch);
    xent_config_format(&cfg, text, sizeof text);
    ck_assert_msg(cfg.split == long_rows[_i].split && cfg.evict == long_rows[_i].evict &&
                      cfg.stash == long_rows[_i].stash && cfg.tpr == long_rows[_i].tpr && cfg.poly == 0,
                  "c=%lld sm_%d: %s, want SPLIT=%d EVICT=%d STASH=%d TPR=%d POLY=0", (long long)long_rows[_i].c,
                  long_rows[_i].arch, text, long_rows[_i].split, long_rows[_i].evict, long_rows[_i].stash,
                  long_rows[_i].tpr);
    ck_assert_msg(xent_config_fits(&cfg, &p, why, sizeof why), "%s: %s", text, why);
    ck_assert_msg(xent_config_arch_fits(&cfg, &p, long_rows[_i].arch, why, sizeof why), "%s: %s", text, why);
    if (cfg.split > 1) ck_assert(!xent_config_reads_twice(&cfg, &p)); /* held by the cluster, not read twice */
    /* the plan's note says what the architecture took */
    ck_assert_int_eq(strstr(what, "no cluster") != NULL, long_rows[_i].arch < 90);
}
END_TEST

int main(void) {
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("problem");
    tcase_add_loop_test(tc, bad_training_fields_are_refused, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, good_training_fields_pass);
    suite_add_tcase(s, tc);
    tc = tcase_create("reference");
    tcase_add_loop_test(tc, reference_gradient_is_the_derivative, 0, (int)(sizeof refs / sizeof refs[0]));
    tcase_add_loop_test(tc, reference_loss_matches_the_forward_reference, 0, (int)(sizeof refs / sizeof refs[0]));
    tcase_add_test(tc, reference_threaded_rows_land_in_place);
    suite_add_tcase(s, tc);
    tc = tcase_create("configs");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, grad_heuristic_fits_and_compiles, 0, (int)(sizeof probs / sizeof probs[0]));
    tcase_add_loop_test(tc, grad_candidates_are_legal_and_few, 0, (int)(sizeof probs / sizeof probs[0]));
    tcase_add_loop_test(tc, grad_legality, 0, (int)(sizeof legal / sizeof legal[0]));
    tcase_add_loop_test(tc, grad_handoff_fits, 0, (int)(sizeof handoffs / sizeof handoffs[0]));
    tcase_add_loop_test(tc, grad_handoff_fitted_to_rows, 0, (int)(sizeof handoff_rows / sizeof handoff_rows[0]));
    tcase_add_loop_test(tc, grad_clusters_need_sm90, 0, (int)(sizeof arch_cases / sizeof arch_cases[0]));
    tcase_add_loop_test(tc, grad_stash_needs_shared_memory, 0, (int)(sizeof smem_cases / sizeof smem_cases[0]));
    tcase_add_loop_test(tc, grad_turing, 0, (int)(sizeof turing_cases / sizeof turing_cases[0]));
    tcase_add_loop_test(tc, grad_stash_fits, 0, (int)(sizeof stashes / sizeof stashes[0]));
    tcase_add_loop_test(tc, grad_flat_fits, 0, (int)(sizeof flats / sizeof flats[0]));
    tcase_add_test(tc, grad_flat_fits_few_rows);
    tcase_add_loop_test(tc, grad_heuristic_shapes, 0, (int)(sizeof shapes / sizeof shapes[0]));
    tcase_add_loop_test(tc, grad_heuristic_holds_long_rows_in_a_cluster, 0,
                        (int)(sizeof long_rows / sizeof long_rows[0]));
    suite_add_tcase(s, tc);
    return run_suite(s);
}
