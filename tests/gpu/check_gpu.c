/*
 * check_gpu.c — the GPU suite of xent: every result of the
 * library against the float64 CPU reference (tune/reference.c), on a machine
 * with an NVIDIA GPU. Run by `make test-gpu`; without a GPU it says why and
 * exits with status 1 (never a pass).
 *
 * What is checked (each "check" is one problem: fresh random inputs, a plan,
 * one or more launches, every output element compared):
 *   - 36 shapes: n = 1, c = 1, c = 2, c = 50257, 64x262144, 1048576x10,
 *     32768x4096, 8192x128256 (bf16), padded rows (row_stride > c, the padding
 *     filled with NaN on the device so a read of it shows), row starts that are
 *     not 16-byte aligned (odd strides, a logits pointer offset by elements),
 *     c not a multiple of any vector width, and one problem spanning more than
 *     2^31 elements (64-bit indexing); each shape runs none, sum and mean with
 *     rotating dtype pairs and options;
 *   - the matrix: every dtype pair (f32/f16/bf16 x i32/i64) x every reduction
 *     x {plain, weights, smoothing, weights+smoothing (half of them with the
 *     weights off 16 bytes), ignore_index inside [0, c) with ignored rows,
 *     write_lse} on three shapes;
 *   - ignore_index (random ignored rows; -100, -1, a value inside [0, c), a
 *     huge one) and all rows ignored (mean NaN, sum 0, none all 0);
 *   - large logit offsets (+-100, +-1000) with and without smoothing;
 *   - bad targets (c, -5, huge): NaN losses, xent_check_targets gives
 *     XENT_EBADTARGET once, then XENT_OK, and the same context keeps working;
 *   - determinism: repeated launches of one plan on the same inputs are bitwise
 *     equal (every check launches twice; the determinism case 5 times, on
 *     split and persistent configs);
 *   - the memo (xent_plan_get twice gives the same plan, also from threads);
 *   - every configuration of the space (xent_space_enumerate(d, NULL, ...) for
 *     each dtype), compiled in parallel, each run on two small random problems
 *     (c in {1, 7, 100, 1000, 5000}, padded/unaligned rows, random split and
 *     persist) against the reference;
 *   - the time of the heuristic plan at 32768x4096 fp32 mean (CUDA events).
 *
 * Tolerances (stated once, used everywhere): TOL = 1e-5, against the float64
 * reference computed on the very values the GPU reads (16-bit logits upcast).
 *   A row loss is formed from lse_i = m + log(sum exp(x - m)), so fp32 can only
 *   promise it to a few ulp of max(|loss_i|, |lse_i|, 1) -- a purely relative
 *   bound is unattainable (PyTorch's fp32 path included) for tiny losses
 *   (a dominant target: loss ~ 1e-3), and for c = 1 (loss exactly 0). Hence
 *   each row has the scale  s_i = max(|ref_i|, max(w_t, 1) * max(|lse_i|, 1)):
 *   none:      every element |out_i - ref_i| <= TOL * s_i (this implies the
 *              norm-wise bound with the same scales); ignored rows exactly 0,
 *              bad-target rows NaN; NaN only ever matches NaN.
 *   sum:       |out - ref| <= TOL * sum_i w_t s_i over the valid rows;
 *   mean:      |out - ref| <= TOL * sum_i w_t s_i / sum_i w_t.
 *              For typical rows (|lse| ~ loss) both are the plain relative
 *              error <= 1e-5; a lost row, a wrong weight or a drifting sum
 *              (errors of 1e-4 per row) fail them.
 *   lse:       every element |out_i - ref_i| <= TOL * max(|ref_i|, 1), and the
 *              norm-wise relative error <= TOL.
 *   The summary reports the plain relative errors (|out - ref| / |ref| for sum
 *   and mean, norm-wise for none and lse) of the outputs whose reference is
 *   not mostly cancellation, and the worst error in units of the bound's scale.
 *   Output buffers are filled with 0xFF bytes (NaN) before every launch, and 64
 *   guard floats after each output must still hold 0xFFFFFFFF afterwards.
 *
 * Environment: XENT_TEST_SEED (repeat a run's inputs; the seed is printed),
 * XENT_TEST_DEVICE (ordinal, default 0), XENT_TEST_JOBS (compile threads,
 * default the CPU count), XENT_TEST_EVERY (a subset: every k-th config of
 * the space and of the split cases; default 1 = all), XENT_TEST_OFFSET (the
 * subset's first, 0 to k-1: k runs cover every case), and Check's CK_RUN_CASE,
 * CK_FORK, CK_TIMEOUT_MULTIPLIER. Kernels go through the library's caches
 * (XENT_KERNEL_CACHE), so a second run compiles nothing.
 *
 * Build alone: gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -pthread -Iinclude -I.
 *   -I/usr/local/cuda/include tests/gpu/check_gpu.c build/libxent.a
 *   -Wl,-Bstatic -lcheck -lsubunit -Wl,-Bdynamic -lrt -L/usr/local/cuda/lib64
 *   -lnvrtc -lsqlite3 -ldl -lpthread -lm -o build/tests/gpu/check_gpu
 */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gen/gen.h"
#include "gen/space.h"
#include "runtime/runtime.h"
#include "tune/reference.h"
#include "tests/files.h"
#include "tests/rand.h"
#include "tests/run_suite.h"
#include "tune/tune.h"
#include "xent.h"

#include "tests/gpu/harness.h"

/* ------------------------------------------------------------------------ */
/* Parallel compilation: fill the kernel caches before plans are built.     */
/* ------------------------------------------------------------------------ */

/* Compile count (config, problem) pairs on all CPUs (xent_compile_many), in
 * chunks of `every` with a progress line after each (every 0: one chunk,
 * quiet); returns the failures. */
static size_t compile_all(const xent_config *cfgs, const xent_problem *probs, int *rcs, size_t count, const char *label,
                          size_t every) {
    const double t0 = now_s();
    const size_t chunk = every ? every : (count ? count : 1);
    char(*errs)[512] = calloc(chunk, sizeof *errs);
    xent_cubin *bins = calloc(chunk, sizeof *bins);
    ck_assert(errs && bins);
    size_t failed = 0;
    for (size_t at = 0; at < count; at += chunk) {
        const int n = (int)(count - at < chunk ? count - at : chunk);
        xent_compile_many(cfgs + at, n, probs + at, n, G.ctx->arch, ncpus(), rcs + at, bins, errs);
        for (int i = 0; i < n; i++) {
            char cfg[200];
            xent_config_format(&cfgs[at + i], cfg, sizeof cfg);
            if (rcs[at + i] != XENT_OK) {
                fprintf(stderr, "%s: compiling %s failed: %s\n%s\n", label, cfg, xent_errstr(rcs[at + i]), errs[i]);
                failed++;
                continue;
            }
            /* CI checks a sample for spills; here, with the GPU machine's cores, every config */
            if (bins[i].spill_bytes > 0 || bins[i].stack_bytes > 0) {
                if (S->cfg_spilled++ < 10)
                    fprintf(stderr, "%s: %s spills %d bytes (%d registers, %d bytes stack)\n", label, cfg,
                            bins[i].spill_bytes, bins[i].registers, bins[i].stack_bytes);
            }
            xent_cubin_free(&bins[i]);
        }
        if (every) fprintf(stderr, "%s: %zu/%zu compiled (%.1f s)\n", label, at + (size_t)n, count, now_s() - t0);
    }
    free(errs);
    free(bins);
    return failed;
}

/* Warm the caches for the plans a list of checks will build (the heuristic
 * config for xent_plan_get; a tune-cache hit would just compile later). */
static void prewarm(const spec *sps, size_t count) {
    xent_config *cfgs = calloc(count ? count : 1, sizeof *cfgs);
    xent_problem *probs = calloc(count ? count : 1, sizeof *probs);
    int *rcs = calloc(count ? count : 1, sizeof *rcs);
    ck_assert(cfgs && probs && rcs);
    for (size_t i = 0; i < count; i++) {
        spec_problem(&sps[i], &probs[i]);
        if (sps[i].cfg)
            cfgs[i] = *sps[i].cfg;
        else
            xent_config_heuristic(&probs[i], G.ctx->info.sm_count, &cfgs[i]);
    }
    compile_all(cfgs, probs, rcs, count, "prewarm", 0); /* failures show in the checks */
    free(cfgs);
    free(probs);
    free(rcs);
}

/* ------------------------------------------------------------------------ */
/* Fixture: a context per test (tests run in forked children, and a CUDA    */
/* context does not survive fork), made current for the driver calls here.  */
/* ------------------------------------------------------------------------ */

static void setup(void) {
    int rc = xent_context_create(&G.ctx, G.ordinal);
    ck_assert_msg(rc == XENT_OK, "xent_context_create: %s: %s", xent_errstr(rc), xent_errmsg(G.ctx));
    G.drv = G.ctx->drv;
    ck_assert_int_eq(xent_ctx_enter(G.ctx, &G.pushed), XENT_OK);
    CU(G.drv->StreamCreate(&G.stream, CU_STREAM_NON_BLOCKING));
}

static void teardown(void) {
    if (!G.ctx) return;
    if (G.stream) G.drv->StreamDestroy(G.stream);
    G.stream = NULL;
    xent_ctx_leave(G.ctx, G.pushed);
    xent_context_destroy(G.ctx);
    G.ctx = NULL;
}

/* ------------------------------------------------------------------------ */
/* Basics: device, memo, thread-safe plan lookup                            */
/* ------------------------------------------------------------------------ */

START_TEST(test_device_info) {
    xent_device_info info;
    ck_assert_int_eq(xent_device_get_info(G.ctx, &info), XENT_OK);
    ck_assert_msg(info.name[0] && info.key[0], "device name '%s', key '%s'", info.name, info.key);
    ck_assert_int_ge(info.cc_major, 7);
    ck_assert_int_gt(info.sm_count, 0);
    ck_assert(info.global_mem_bytes > ((size_t)1 << 30));
    ck_assert_int_eq(G.ctx->arch, info.cc_major * 10 + info.cc_minor);
    fprintf(stderr, "device %d: %s (key %s), sm_%d%d, %d SMs, L2 %zu MB, %zu MB\n", G.ordinal, info.name, info.key,
            info.cc_major, info.cc_minor, info.sm_count, info.l2_bytes >> 20, info.global_mem_bytes >> 20);
}
END_TEST

START_TEST(test_memo) {
    xent_problem p, q;
    xent_plan *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    xent_problem_init(&p, 1000, 4096);
    ck_assert_int_eq(xent_plan_get(G.ctx, &p, &a), XENT_OK);
    size_t nplans = G.ctx->nplans;
    ck_assert_int_eq(xent_plan_get(G.ctx, &p, &b), XENT_OK);
    ck_assert_ptr_eq(a, b);
    q = p;
    q.row_stride = 0; /* normalized to c: the same problem */
    ck_assert_int_eq(xent_plan_get(G.ctx, &q, &c), XENT_OK);
    ck_assert_ptr_eq(a, c);
    ck_assert_uint_eq(G.ctx->nplans, nplans);
    q = p;
    q.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_plan_get(G.ctx, &q, &d), XENT_OK);
    ck_assert_ptr_ne(a, d);
    ck_assert_uint_eq(G.ctx->nplans, nplans + 1);
    char buf[512];
    ck_assert_int_eq(xent_plan_describe(a, buf, sizeof buf), XENT_OK);
    ck_assert_msg(strstr(buf, "VEC=") && strstr(buf, "source="), "describe: %s", buf);
    ck_assert_int_le((int)xent_plan_source(a), (int)XENT_SOURCE_EXPLICIT);

    /* xent_forward goes through the memo: no new plan */
    spec sp;
    spec_init(&sp, "memo", 1000, 4096);
    ck_assert(run_check(&sp));
    ck_assert_uint_eq(G.ctx->nplans, nplans + 1);
    ck_assert_int_eq(xent_plan_get(G.ctx, &p, &b), XENT_OK);
    ck_assert_ptr_eq(a, b);
}
END_TEST

typedef struct memo_thread {
    const xent_problem *p;
    xent_plan *plan;
    int rc;
} memo_thread;

static void *memo_worker(void *arg) {
    memo_thread *m = arg;
    m->rc = xent_plan_get(G.ctx, m->p, &m->plan);
    return NULL;
}

START_TEST(test_memo_threads) {
    xent_problem p;
    xent_problem_init(&p, 513, 1031);
    p.logits = XENT_BF16;
    p.targets = XENT_I32;
    size_t before = G.ctx->nplans;
    memo_thread m[8];
    pthread_t tid[8];
    for (int k = 0; k < 8; k++) {
        m[k] = (memo_thread){&p, NULL, -1};
        ck_assert_int_eq(pthread_create(&tid[k], NULL, memo_worker, &m[k]), 0);
    }
    for (int k = 0; k < 8; k++) pthread_join(tid[k], NULL);
    for (int k = 0; k < 8; k++) {
        ck_assert_msg(m[k].rc == XENT_OK, "thread %d: %s", k, xent_errstr(m[k].rc));
        ck_assert_ptr_eq(m[k].plan, m[0].plan);
    }
    ck_assert_uint_eq(G.ctx->nplans, before + 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Shapes                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct shape {
    int64_t n, c, stride; /* stride 0: c */
    int off;              /* logits pointer offset in elements */
    int dt;               /* -1: rotate; else the logits dtype (memory) */
} shape;

static const shape shapes[] = {
    {1, 1, 0, 0, -1}, /* n = 1, c = 1: the loss is exactly 0 */
    {1, 2, 0, 0, -1}, /* c = 2 */
    {2, 1, 0, 1, -1},
    {7, 2, 0, 0, -1},
    {3, 3, 0, 1, -1},
    {1, 7, 0, 0, -1},
    {2, 4, 0, 0, -1},
    {31, 31, 0, 0, -1},
    {1, 50257, 0, 0, -1}, /* GPT-2 vocabulary, odd */
    {8, 50257, 0, 0, -1},
    {513, 50257, 50264, 3, -1}, /* padded rows, unaligned start */
    {64, 262144, 0, 0, -1},     /* few rows, huge c: split */
    {1048576, 10, 0, 0, -1},    /* many tiny rows */
    {32768, 4096, 0, 0, -1},    /* KernelBench level 1 problem 95 */
    {4096, 32000, 0, 0, -1},
    {8192, 128256, 0, 0, XENT_BF16}, /* Llama 3 vocabulary, 2 GB of bf16 */
    {17, 1000, 1003, 0, -1},         /* odd stride > c */
    {33, 4097, 4100, 1, -1},
    {129, 127, 0, 0, -1},
    {1, 262144, 0, 0, -1}, /* one row: all the GPU on it */
    {2, 131073, 0, 1, -1},
    {300, 8191, 0, 0, -1},
    {4096, 33, 40, 0, -1},
    {100000, 3, 0, 0, -1},
    {65537, 17, 0, 0, -1},
    {256, 2048, 0, 3, -1},
    {1, 1000000, 0, 0, -1},
    {5, 1048577, 0, 0, -1},
    {1023, 1025, 0, 0, -1},
    {10, 100, 128, 0, -1},
    {777, 777, 0, 1, -1},
    {16384, 512, 0, 0, -1},
    {4, 65536, 0, 0, -1},
    {3000, 257, 263, 5, -1},
    {2, 5, 9, 1, -1},
    /* more than 2^31 elements between the first and the last logit: 64-bit
     * indexing (4.3 GB of bf16 on the device, 131 MB of logits on the host) */
    {2049, 32000, 1048583, 0, XENT_BF16},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* The three checks of shape s (none, sum, mean); options rotate with a fixed
 * hash, so the kernels of a shape are the same from run to run (disk cache)
 * while the inputs are fresh. */
static void shape_specs(int s, spec out[3]) {
    const shape *sh = &shapes[s];
    static const float scales[4] = {0.5f, 1.0f, 2.0f, 4.0f}, offsets[4] = {0.0f, -3.0f, 10.0f, 50.0f},
                       jitters[3] = {0.0f, 1.0f, 5.0f};
    for (int r = 0; r < 3; r++) {
        spec *sp = &out[r];
        spec_init(sp, "shapes", sh->n, sh->c);
        sp->stride = sh->stride;
        sp->off = sh->off;
        int pair = (s + r) % 6;
        sp->dt = sh->dt >= 0 ? (xent_dtype)sh->dt : (xent_dtype)(pair % 3);
        sp->it = (xent_index)(pair / 3);
        sp->red = (xent_reduction)r;
        uint64_t h = mix64(0x5eed5, (uint64_t)(s * 3 + r));
        sp->weights = (int)(h & 1);
        sp->smoothing = (h >> 1) & 1 ? 0.1f : 0.0f;
        sp->lse = (int)((h >> 2) & 1) || r == 0;
        static const double p_ign[3] = {0.0, 0.05, 0.3};
        sp->p_ignore = p_ign[(h >> 3) % 3];
        switch ((h >> 5) % 4) {
        case 0: sp->ignore_index = sh->c > 1 ? sh->c / 2 : -1; break; /* inside [0, c) */
        case 1: sp->ignore_index = -1; break;
        default: sp->ignore_index = -100;
        }
        sp->dist = (int)((h >> 7) % 3);
        sp->scale = scales[(h >> 9) % 4];
        sp->offset = offsets[(h >> 11) % 4];
        sp->jitter = jitters[(h >> 13) % 3];
        sp->use_stream = (int)((h >> 15) & 1);
        sp->own_ws = (int)((h >> 16) & 1);
    }
}

START_TEST(test_shapes) {
    spec sps[3];
    shape_specs(_i, sps);
    prewarm(sps, 3);
    double t0 = now_s();
    int ok = 0;
    for (int r = 0; r < 3; r++) ok += run_check(&sps[r]);
    S->shapes_run++;
    S->shape_checks += 3;
    fprintf(stderr, "shape %2d/%d %" PRId64 "x%" PRId64 ": %d/3 checks passed (%.1f s)\n", _i + 1, NSHAPES,
            shapes[_i].n, shapes[_i].c, ok, now_s() - t0);
    ck_assert_msg(ok == 3, "shape %" PRId64 "x%" PRId64 ": %d of 3 checks failed (details on stderr)", shapes[_i].n,
                  shapes[_i].c, 3 - ok);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The matrix: dtype pairs x reductions x options                           */
/* ------------------------------------------------------------------------ */

static const shape matrix_shapes[] = {{37, 1000, 0, 0, -1}, {5, 50257, 0, 1, -1}, {300, 4097, 4099, 1, -1}};
#define NMATRIX 108 /* 6 pairs x 3 reductions x 6 option sets */

static void matrix_spec(int m, int k, spec *sp) {
    const shape *sh = &matrix_shapes[m];
    int pair = k % 6, red = (k / 6) % 3, opt = k / 18;
    spec_init(sp, "matrix", sh->n, sh->c);
    sp->stride = sh->stride;
    sp->off = sh->off;
    sp->dt = (xent_dtype)(pair % 3);
    sp->it = (xent_index)(pair / 3);
    sp->red = (xent_reduction)red;
    sp->use_stream = k & 1;
    sp->own_ws = (k / 2) & 1;
    switch (opt) {
    case 0: break; /* plain */
    case 1:
        sp->weights = 1;
        sp->p_ignore = 0.1;
        break;                           /* weights (ignored rows too) */
    case 2: sp->smoothing = 0.1f; break; /* label smoothing */
    case 3:
        sp->weights = 1;
        sp->woff = k & 1; /* half of them off 16 bytes: the 16-bit wide teams' per-class path */
        sp->smoothing = 0.25f;
        sp->p_ignore = 0.1;
        break;
    case 4:
        sp->ignore_index = 3;
        sp->p_ignore = 0.25;
        sp->dist = DIST_PEAKY;
        break; /* ignore inside [0, c) */
    default:
        sp->lse = 1;
        sp->dist = DIST_UNIFORM;
        break;
    }
}

START_TEST(test_matrix) {
    spec sps[NMATRIX];
    for (int k = 0; k < NMATRIX; k++) matrix_spec(_i, k, &sps[k]);
    double t0 = now_s();
    prewarm(sps, NMATRIX);
    double t1 = now_s();
    int ok = 0;
    for (int k = 0; k < NMATRIX; k++) ok += run_check(&sps[k]);
    S->matrix_checks += NMATRIX;
    fprintf(stderr, "matrix %" PRId64 "x%" PRId64 ": %d/%d checks passed (compile %.1f s, run %.1f s)\n",
            matrix_shapes[_i].n, matrix_shapes[_i].c, ok, NMATRIX, t1 - t0, now_s() - t1);
    ck_assert_msg(ok == NMATRIX, "%d of %d matrix checks failed (details on stderr)", NMATRIX - ok, NMATRIX);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* ignore_index, all rows ignored, large offsets                            */
/* ------------------------------------------------------------------------ */

START_TEST(test_ignore_index) {
    const int64_t ignores[4] = {-100, -1, 500, (int64_t)1 << 40};
    int ok = 0, total = 0;
    for (int g = 0; g < 4; g++)
        for (int r = 0; r < 3; r++)
            for (int it = 0; it < 2; it++) {
                if (g == 3 && it == 0) continue; /* 2^40 is no int32 */
                spec sp;
                spec_init(&sp, "ignore", 1000, 1000);
                sp.ignore_index = ignores[g];
                sp.p_ignore = 0.3;
                sp.red = (xent_reduction)r;
                sp.it = (xent_index)it;
                sp.dt = (xent_dtype)((g + r) % 3);
                sp.weights = (g + r) & 1;
                sp.smoothing = g == 2 ? 0.2f : 0.0f;
                sp.lse = r == 0;
                ok += run_check(&sp);
                total++;
            }
    ck_assert_msg(ok == total, "%d of %d ignore_index checks failed", total - ok, total);
}
END_TEST

/* Every row ignored: mean is NaN (0/0, as PyTorch), sum 0, none all 0 --
 * asserted directly as well as through the reference. */
START_TEST(test_all_ignored) {
    xent_config split;
    xent_problem p16;
    char why[256];
    xent_problem_init(&p16, 16, 65536);
    ck_assert_msg(make_config("VEC=4 TPR=512 BLOCK=512 ITEMS=2 PASSES=1 CACHE=0 SPLIT=4 PERSIST=1", &p16, &split, why,
                              sizeof why),
                  "%s", why);
    const int64_t dims[3][2] = {{1, 100}, {1000, 1000}, {16, 65536}};
    for (int d = 0; d < 3; d++)
        for (int r = 0; r < 3; r++)
            for (int variant = 0; variant < 2; variant++) {
                spec sp;
                spec_init(&sp, "all-ignored", dims[d][0], dims[d][1]);
                sp.p_ignore = 1.0;
                sp.red = (xent_reduction)r;
                sp.weights = variant;
                sp.smoothing = variant ? 0.1f : 0.0f;
                sp.cfg = d == 2 && variant ? &split : NULL;
                sp.lse = 1;
                ck_assert(run_check(&sp));
                /* and without the reference: one more launch, read back */
                xent_problem p;
                spec_problem(&sp, &p);
                xent_plan *plan;
                ck_assert_int_eq(xent_plan_get(G.ctx, &p, &plan), XENT_OK);
                int64_t n = sp.n, nout = r == 0 ? n : 1;
                CUdeviceptr lg = dalloc((size_t)n * (size_t)sp.c * 4), tg = dalloc((size_t)n * 8),
                            ls = dalloc((size_t)nout * 4), lz = dalloc((size_t)n * 4), wd = 0;
                CU(G.drv->MemsetD8(lg, 0x3f, (size_t)n * (size_t)sp.c * 4)); /* 0.747 everywhere */
                int64_t *t = malloc((size_t)n * 8);
                float *o = malloc((size_t)nout * 4);
                for (int64_t i = 0; i < n; i++) t[i] = -100;
                CU(G.drv->MemcpyHtoD(tg, t, (size_t)n * 8));
                if (sp.weights) {
                    wd = dalloc((size_t)sp.c * 4);
                    CU(G.drv->MemsetD8(wd, 0x3f, (size_t)sp.c * 4));
                }
                CU(G.drv->MemsetD8(ls, 0xFF, (size_t)nout * 4));
                xent_args a = {(const void *)(uintptr_t)lg,
                               (const void *)(uintptr_t)tg,
                               (const float *)(uintptr_t)wd,
                               (float *)(uintptr_t)ls,
                               (float *)(uintptr_t)lz,
                               NULL,
                               NULL,
                               NULL,
                               NULL};
                ck_assert_int_eq(xent_plan_launch(plan, NULL, &a), XENT_OK);
                ck_assert_int_eq(xent_check_targets(G.ctx, NULL), XENT_OK);
                CU(G.drv->MemcpyDtoH(o, ls, (size_t)nout * 4));
                if (r == XENT_REDUCE_MEAN)
                    ck_assert_msg(isnan(o[0]), "mean of all ignored is %g, not NaN", (double)o[0]);
                else if (r == XENT_REDUCE_SUM)
                    ck_assert_msg(o[0] == 0.0f, "sum of all ignored is %g", (double)o[0]);
                else
                    for (int64_t i = 0; i < n; i++) ck_assert_msg(o[i] == 0.0f, "row %" PRId64 ": %g", i, (double)o[i]);
                free(t);
                free(o);
                dfree(lg);
                dfree(tg);
                dfree(ls);
                dfree(lz);
                dfree(wd);
            }
}
END_TEST

/* Logits far from 0: an accuracy probe of lse = max + log(sum), of exp2 with
 * a folded shift, and of the smoothing sum. */
START_TEST(test_large_offsets) {
    const float offs[4] = {100.0f, -100.0f, 1000.0f, -1000.0f};
    const int64_t dims[3][2] = {{1000, 4096}, {64, 50257}, {4096, 100}};
    int ok = 0, total = 0;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (int ls = 0; ls < 2; ls++) {
                spec sp;
                spec_init(&sp, "offsets", dims[d][0], dims[d][1]);
                sp.offset = offs[o];
                sp.jitter = 5.0f;
                sp.scale = 2.0f;
                sp.dt = (xent_dtype)((o + d) % 3);
                sp.red = (xent_reduction)((o + d + ls) % 3);
                sp.smoothing = ls ? 0.1f : 0.0f;
                sp.weights = d == 1;
                sp.lse = 1;
                ok += run_check(&sp);
                total++;
            }
    ck_assert_msg(ok == total, "%d of %d large-offset checks failed", total - ok, total);
}
END_TEST

/* Check k (0-5) of plan i of a sum or mean's finish, rows x c under cfg_text: the dtype turns
 * with both, sum and mean alternate, then weights, smoothing, the lse, ignored rows, a caller's
 * workspace; relaunches must be bitwise equal. Fills the spec, its problem and its config
 * (sp->cfg points at cfg), for the caller to assert the launch it expects. */
static void reduction_spec(spec *sp, xent_problem *p, xent_config *cfg, const char *label, const char *cfg_text,
                           int64_t rows, int64_t c, int k, int i) {
    char why[256];
    spec_init(sp, label, rows, c);
    sp->dt = (xent_dtype)((k + i) % 3);
    sp->red = k % 2 ? XENT_REDUCE_SUM : XENT_REDUCE_MEAN;
    sp->weights = k / 2 == 1;
    sp->smoothing = k / 2 == 2 ? 0.1f : 0.0f;
    sp->lse = k == 3;
    sp->p_ignore = k == 4 ? 0.3 : 0.0;
    sp->own_ws = k % 3 == 0;
    sp->repeat = 2;
    spec_problem(sp, p);
    ck_assert_msg(make_config(cfg_text, p, cfg, why, sizeof why), "%s: %s", cfg_text, why);
    sp->cfg = cfg;
}

/* A sum or mean whose launch is one block (XENT_ONE_BLOCK: the block writes
 * the loss from its own sums) and the same config one row past it (two
 * blocks: the published partials): warp teams, a block a row, a thread a row
 * over staged tiles, rows with scalar edges; each dtype, options, ignored rows,
 * a caller's workspace (left zeroed), relaunches bitwise equal. */
START_TEST(test_one_block) {
    static const struct {
        const char *cfg;
        int64_t rows, c; /* rows: as many as one block's teams */
    } plans[] = {
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=2 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1", 4, 300},
        {"VEC=2 TPR=8 BLOCK=256 ITEMS=2 PASSES=2 CACHE=1 SPLIT=1 PERSIST=0", 32, 77},
        {"VEC=4 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 SPLIT=1 PERSIST=3", 1, 5000},
        {"VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=0", 128, 7},
        /* rows that start and end off a vector: their edges loaded once (XENT_EDGES_ONCE) */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=2 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1", 4, 301},
        {"VEC=2 TPR=2 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 SPLIT=1 PERSIST=1", 64, 11},
    };
    int ok = 0, total = 0;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        for (int extra = 0; extra < 2; extra++)
            for (int k = 0; k < 6; k++) {
                spec sp;
                xent_problem p;
                xent_config cfg;
                reduction_spec(&sp, &p, &cfg, "one block", plans[i].cfg, plans[i].rows + extra, plans[i].c, k, (int)i);
                ck_assert_int_eq(xent_fwd_one_block(&cfg, &p), !extra);
                ck_assert_int_eq(xent_fwd_edges_once(&cfg, &p), !extra && cfg.passes == 1 && p.c % cfg.vec != 0);
                ok += run_check(&sp);
                total++;
            }
    ck_assert_msg(ok == total, "%d of %d one-block checks failed", total - ok, total);
}
END_TEST

/* A sum or mean of 32 MB or more: its blocks store their partials and
 * leave, and xent_fwd_finish sums them after the grid (finish=apart in the
 * plan's description), from a grid of many rounds (PERSIST=0) or of one;
 * the same plan on a tenth of the rows finishes in its last block. Warp
 * teams, a block a row, a thread a row over staged tiles; each dtype,
 * options, ignored rows, a caller's workspace, relaunches bitwise equal. */
START_TEST(test_finish_apart) {
    static const struct {
        const char *cfg;
        int64_t rows, c; /* 32 MB of 16-bit logits or more */
    } plans[] = {
        {"VEC=4 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 SPLIT=1 PERSIST=0", 200003, 100},
        {"VEC=4 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 SPLIT=1 PERSIST=0", 20000, 2000},
        {"VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=0", 2500000, 7},
    };
    int ok = 0, total = 0;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        for (int k = 0; k < 6; k++)
            for (int tenth = 0; tenth < 2; tenth++) {
                spec sp;
                xent_problem p;
                xent_config cfg;
                char desc[XENT_DESCRIBE_LEN];
                reduction_spec(&sp, &p, &cfg, "finish apart", plans[i].cfg, tenth ? plans[i].rows / 10 : plans[i].rows,
                               plans[i].c, k, (int)i);
                cfg.persist = k % 2 ? 0 : 1;
                xent_plan *plan;
                ck_assert_int_eq(xent_plan_build(G.ctx, &p, &cfg, XENT_SOURCE_EXPLICIT, &plan), XENT_OK);
                ck_assert_int_eq(xent_plan_describe(plan, desc, sizeof desc), XENT_OK);
                xent_plan_destroy(plan);
                ck_assert_msg((strstr(desc, "finish=apart") == NULL) == tenth, "%s", desc);
                ok += run_check(&sp);
                total++;
            }
    ck_assert_msg(ok == total, "%d of %d checks of a finish apart failed", total - ok, total);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Bad targets                                                              */
/* ------------------------------------------------------------------------ */

START_TEST(test_bad_targets) {
    xent_config split;
    xent_problem p64;
    char why[256];
    xent_problem_init(&p64, 64, 20000);
    ck_assert_msg(make_config("VEC=4 TPR=256 BLOCK=256 ITEMS=1 PASSES=2 CACHE=0 SPLIT=4 PERSIST=0", &p64, &split, why,
                              sizeof why),
                  "%s", why);
    int ok = 0, total = 0;
    for (int r = 0; r < 3; r++)
        for (int variant = 0; variant < 4; variant++) {
            spec sp;
            spec_init(&sp, "bad-targets", variant == 3 ? 64 : 1000, variant == 3 ? 20000 : 257);
            sp.red = (xent_reduction)r;
            sp.bad = variant == 0 ? 1 : 12; /* c, -5, +-huge */
            sp.it = (xent_index)(variant & 1);
            sp.dt = (xent_dtype)((r + variant) % 3);
            sp.weights = variant == 2; /* a bad target must not index the weights */
            sp.smoothing = variant == 2 ? 0.1f : 0.0f;
            sp.p_ignore = 0.1;
            sp.lse = r == 0;
            sp.cfg = variant == 3 ? &split : NULL;
            ok += run_check(&sp); /* expects XENT_EBADTARGET, then OK on a second check */
            total++;
            /* the same context, good targets: works, and the flag stays clear */
            sp.bad = 0;
            ok += run_check(&sp);
            total++;
        }
    /* -5 is not bad when it is the ignore_index */
    spec sp;
    spec_init(&sp, "bad-targets", 500, 300);
    sp.ignore_index = -5;
    sp.p_ignore = 0.2;
    ok += run_check(&sp);
    total++;
    ck_assert_msg(ok == total, "%d of %d bad-target checks failed", total - ok, total);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Determinism: one plan, the same inputs, five launches, the same bits     */
/* ------------------------------------------------------------------------ */

typedef struct det_case {
    int64_t n, c;
    xent_dtype dt;
    xent_reduction red;
    const char *cfg; /* NULL: heuristic */
} det_case;

static const det_case det_cases[] = {
    {64, 262144, XENT_F32, XENT_REDUCE_MEAN, NULL},
    {64, 262144, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=512 BLOCK=512 ITEMS=4 PASSES=1 CACHE=0 SPLIT=16 PERSIST=1"},
    {64, 262144, XENT_F32, XENT_REDUCE_SUM, "VEC=4 TPR=512 BLOCK=512 ITEMS=4 PASSES=2 CACHE=1 SPLIT=8 PERSIST=0"},
    {64, 262144, XENT_BF16, XENT_REDUCE_NONE, "VEC=8 TPR=512 BLOCK=512 ITEMS=4 PASSES=1 CACHE=2 SPLIT=32 PERSIST=1"},
    {32768, 4096, XENT_F32, XENT_REDUCE_MEAN, NULL},
    {32768, 4096, XENT_F32, XENT_REDUCE_SUM, "VEC=4 TPR=32 BLOCK=128 ITEMS=16 PASSES=2 CACHE=1 SPLIT=1 PERSIST=1"},
    {32768, 4096, XENT_F32, XENT_REDUCE_NONE, "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=2 SPLIT=1 PERSIST=3"},
    {64, 262144, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 SPLIT=4 PERSIST=3"},
    {32768, 4096, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 SPLIT=2 PERSIST=1"},
    {32768, 4096, XENT_F16, XENT_REDUCE_NONE, "VEC=8 TPR=128 BLOCK=128 ITEMS=4 PASSES=2 CACHE=0 SPLIT=1 PERSIST=0"},
    {1048576, 10, XENT_BF16, XENT_REDUCE_MEAN, NULL},
    {1048576, 10, XENT_BF16, XENT_REDUCE_SUM, "VEC=2 TPR=1 BLOCK=256 ITEMS=8 PASSES=2 CACHE=0 SPLIT=1 PERSIST=1"},
    {1000, 50257, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=2 CACHE=0 SPLIT=4 PERSIST=1"},
    /* split rows' combine: a warp a team and several teams a block, more segments than lanes */
    {64, 262144, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=1 SPLIT=64 PERSIST=0"},
    {5, 100003, XENT_BF16, XENT_REDUCE_NONE, "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=2 CACHE=0 SPLIT=128 PERSIST=1"},
    {7, 1000003, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 SPLIT=128 PERSIST=0"},
    /* block partials summed apart, after a grid of several rounds (xent_fwd_finish) */
    {262144, 300, XENT_BF16, XENT_REDUCE_MEAN, "VEC=4 TPR=4 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=0"},
    {32768, 4096, XENT_F32, XENT_REDUCE_SUM, "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 SPLIT=1 PERSIST=0"},
    /* the balanced grid (fewer blocks than resident) */
    {100003, 37, XENT_F32, XENT_REDUCE_MEAN, "VEC=1 TPR=4 BLOCK=128 ITEMS=16 PASSES=1 CACHE=0 SPLIT=1 PERSIST=3"},
    {32768, 4096, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=3"},
    {8192, 4099, XENT_BF16, XENT_REDUCE_SUM, "VEC=8 TPR=16 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 SPLIT=1 PERSIST=3"},
    /* exponentials split between the MUFU and FMA pipes */
    {32768, 4096, XENT_BF16, XENT_REDUCE_MEAN,
     "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1 POLY=8"},
    {8192, 4099, XENT_F16, XENT_REDUCE_SUM, "VEC=8 TPR=16 BLOCK=128 ITEMS=8 PASSES=2 CACHE=0 SPLIT=1 PERSIST=3 POLY=4"},
};
#define NDET ((int)(sizeof det_cases / sizeof det_cases[0]))

START_TEST(test_determinism) {
    spec sps[NDET];
    xent_config cfgs[NDET];
    for (int k = 0; k < NDET; k++) {
        const det_case *d = &det_cases[k];
        spec_init(&sps[k], "determinism", d->n, d->c);
        sps[k].dt = d->dt;
        sps[k].red = d->red;
        sps[k].repeat = 4;
        sps[k].smoothing = k % 3 == 1 ? 0.1f : 0.0f;
        sps[k].weights = k % 4 == 2;
        sps[k].p_ignore = 0.05;
        sps[k].lse = k % 2;
        sps[k].own_ws = k % 2;
        sps[k].use_stream = k % 3 == 0;
        if (d->cfg) {
            char why[256];
            xent_problem p;
            spec_problem(&sps[k], &p);
            if (make_config(d->cfg, &p, &cfgs[k], why, sizeof why))
                sps[k].cfg = &cfgs[k];
            else /* the space changed under this list: say so, still check the heuristic */
                fprintf(stderr, "determinism: %s is no longer legal (%s); update the list. Using the heuristic.\n",
                        d->cfg, why);
        }
    }
    prewarm(sps, NDET);
    int ok = 0;
    for (int k = 0; k < NDET; k++) ok += run_check(&sps[k]);
    ck_assert_msg(ok == NDET, "%d of %d determinism checks failed", NDET - ok, NDET);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Split rows with smoothing and weights on 7-class rows, where a launch    */
/* must be bitwise equal to the one before: this grid runs such configs     */
/* under every split and grid choice.                                       */
/* ------------------------------------------------------------------------ */

static const char *const split_cfgs[] = {
    "VEC=1 TPR=128 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2",
    "VEC=1 TPR=256 BLOCK=256 ITEMS=1 PASSES=2 CACHE=1",
    "VEC=1 TPR=128 BLOCK=128 ITEMS=1 PASSES=1 CACHE=2",
    "VEC=4 TPR=32 BLOCK=256 ITEMS=4 PASSES=2 CACHE=0",
};

START_TEST(test_split_smoothing) {
    static const int splits[] = {2, 8, 128};
    static const int persists[] = {0, 1, 3}; /* every value the space has */
    /* few rows too: a sum or mean of those is merged in one level by the last
     * team where one round of it covers them (12 and 100 rows: under some of
     * these splits and teams, not under others) */
    static const int64_t shapes[][2] = {{154, 7}, {677, 7}, {300, 33}, {3, 7}, {9, 33}, {12, 33}, {100, 7}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int ran = 0, ok = 0, idx = 0;
    for (size_t ci = 0; ci < sizeof split_cfgs / sizeof split_cfgs[0]; ci++)
        for (int si = 0; si < 3; si++)
            for (int pi = 0; pi < 3; pi++)
                for (int k = 0; k < nshapes; k++) {
                    const int persist = persists[pi];
                    if (!test_picked((size_t)idx++)) continue;
                    spec sp;
                    spec_init(&sp, "split+smoothing", shapes[k][0], shapes[k][1]);
                    sp.red = (si + k) % 2 ? XENT_REDUCE_MEAN : XENT_REDUCE_NONE;
                    sp.smoothing = 0.1f;
                    sp.weights = 1;
                    sp.lse = 1;
                    sp.dist = DIST_PEAKY;
                    sp.repeat = 4;
                    sp.p_ignore = k % 2 == 1 ? 0.1 : 0.0;
                    sp.own_ws = (persist + k) % 2;
                    sp.use_stream = k % 2;
                    sp.off = k == 0;
                    char text[160], why[256];
                    snprintf(text, sizeof text, "%s SPLIT=%d PERSIST=%d", split_cfgs[ci], splits[si], persist);
                    xent_problem p;
                    xent_config cfg;
                    spec_problem(&sp, &p);
                    ck_assert_msg(make_config(text, &p, &cfg, why, sizeof why), "%s: %s", text, why);
                    sp.cfg = &cfg;
                    ran++;
                    ok += run_check(&sp);
                }
    ck_assert_msg(ok == ran, "%d of %d split+smoothing checks failed (details on stderr)", ran - ok, ran);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Every configuration of the space                                         */
/* ------------------------------------------------------------------------ */

static const int64_t sweep_c[5] = {1, 7, 100, 1000, 5000};
static const int64_t sweep_nmax[5] = {3000, 2000, 600, 150, 40};

/* The compiled-in problem options of config i: a fixed hash, so a second
 * run finds every kernel in the disk cache. Its class count too: c <= 256
 * is compiled in (XENT_C), and both runs of a config take this c, so the
 * kernels compiled in parallel up front are the ones that run (drawn per
 * run, they were compiled one by one: 200 configs took 87 s, not 9). */
static void sweep_problem(xent_dtype d, size_t i, xent_problem *p) {
    uint64_t h = mix64(0xc0ff1ee + (uint64_t)d, (uint64_t)i);
    xent_problem_init(p, 1, sweep_c[(h >> 8) % 5]);
    p->logits = d;
    p->targets = (xent_index)(h & 1);
    p->reduction = (xent_reduction)((h >> 1) % 3);
    p->has_weights = (int)((h >> 3) & 1);
    p->label_smoothing = (h >> 4) % 3 == 0 ? 0.1f : 0.0f;
    p->write_lse = (int)((h >> 6) & 1);
}

/* The sweep's selection, so that one device call of ten minutes can run a
 * part of it: XENT_TEST_SWEEP_DTYPES (e.g. "f16,bf16"), XENT_TEST_SWEEP_MATCH
 * (configs whose text holds it, e.g. "TILE=1"), XENT_TEST_EVERY (every
 * k-th) and XENT_TEST_OFFSET (from the j-th). A selection is printed, never
 * silent; a config's problem depends on its index in the space alone, so the
 * parts of a sweep split across calls are the whole sweep's. */
static int sweep_dtype_selected(xent_dtype d) {
    const char *e = getenv("XENT_TEST_SWEEP_DTYPES");
    if (!e || !*e) return 1;
    char list[64];
    snprintf(list, sizeof list, ",%s,", e);
    char item[16];
    snprintf(item, sizeof item, ",%s,", dt_name(d));
    return strstr(list, item) != NULL;
}

static size_t sweep_select(xent_config *all, size_t total) {
    const char *match = getenv("XENT_TEST_SWEEP_MATCH");
    if (!match || !*match) return total;
    size_t kept = 0;
    for (size_t k = 0; k < total; k++) {
        char text[256];
        xent_config_format(&all[k], text, sizeof text);
        if (strstr(text, match)) all[kept++] = all[k];
    }
    return kept;
}

START_TEST(test_sweep) {
    const xent_dtype d = (xent_dtype)_i;
    if (!sweep_dtype_selected(d)) {
        fprintf(stderr, "configs %s: NOT RUN (XENT_TEST_SWEEP_DTYPES=%s)\n", dt_name(d),
                getenv("XENT_TEST_SWEEP_DTYPES"));
        S->sweep_not_run++;
        return;
    }
    size_t every = (size_t)test_every(), offset = (size_t)test_offset();
    size_t total = xent_space_enumerate(d, NULL, 0, NULL, 0);
    ck_assert_uint_gt(total, 0);
    xent_config *all = malloc(total * sizeof *all);
    ck_assert_ptr_nonnull(all);
    ck_assert_uint_eq(xent_space_enumerate(d, NULL, 0, all, total), total);
    total = sweep_select(all, total);
    ck_assert_msg(total > 0, "XENT_TEST_SWEEP_MATCH=%s selects no config", getenv("XENT_TEST_SWEEP_MATCH"));
    size_t count = total > offset ? (total - offset + every - 1) / every : 0;
    ck_assert_msg(count > 0, "XENT_TEST_OFFSET=%zu selects no config", offset);
    xent_config *cfgs = malloc(count * sizeof *cfgs);
    xent_problem *probs = malloc(count * sizeof *probs);
    int *rcs = calloc(count, sizeof *rcs);
    ck_assert(cfgs && probs && rcs);
    for (size_t k = 0; k < count; k++) {
        char why[256];
        cfgs[k] = all[offset + k * every];
        ck_assert_msg(xent_config_legal(&cfgs[k], d, why, sizeof why), "enumerated config is illegal: %s", why);
        sweep_problem(d, offset + k * every, &probs[k]);
    }
    char label[64];
    snprintf(label, sizeof label, "configs %s", dt_name(d));
    fprintf(stderr, "%s: %zu of %zu configs, %d compile threads\n", label, count, total, ncpus());
    double t0 = now_s();
    const long spilled_before = S->cfg_spilled;
    size_t cfail = compile_all(cfgs, probs, rcs, count, label, 200);
    double t1 = now_s();
    S->sweep_compile_s += t1 - t0;
    S->cfg_total += (long)total;
    S->cfg_compile_failed += (long)cfail;

    static const int splits[8] = {1, 2, 4, 8, 16, 32, 64, 128};
    size_t failed = 0, ran = 0;
    uint64_t s = mix64(S->seed, 0x5ee9 + (uint64_t)d);
    for (size_t k = 0; k < count; k++) {
        if (rcs[k] != XENT_OK) {
            failed++;
            continue;
        }
        int cfg_ok = 1;
        for (int v = 0; v < 2; v++) { /* two problems: different c, n, stride, split, persist */
            xent_config cfg = cfgs[k];
            cfg.split = splits[rand_below(&s, 8)];
            cfg.persist = (int)rand_below(&s, 3);
            if (cfg.persist == 2) cfg.persist = 3;                   /* the schedules: 0, 1 and the balanced grid */
            if (!xent_config_legal(&cfg, d, NULL, 0)) cfg.split = 1; /* e.g. TILE takes SPLIT=1 */
            int ci = 4;
            while (ci > 0 && sweep_c[ci] != probs[k].c) ci--;
            spec sp;
            spec_init(&sp, label, 1, 1);
            sp.dt = d;
            sp.it = probs[k].targets;
            sp.red = probs[k].reduction;
            sp.weights = probs[k].has_weights;
            sp.smoothing = probs[k].label_smoothing;
            sp.lse = probs[k].write_lse;
            /* the largest c of the list at or below ci that the config can run (TILE: shared memory) */
            const int padded = rand_below(&s, 3) == 0;
            const int64_t pad = 1 + (int64_t)rand_below(&s, 9);
            xent_problem fp;
            for (;; ci--) {
                sp.c = ci >= 0 ? sweep_c[ci] : 1;
                sp.n = 1 + (int64_t)rand_below(&s, (uint64_t)sweep_nmax[ci >= 0 ? ci : 0]);
                sp.stride = padded && ci >= 0 ? sp.c + pad : 0;
                spec_problem(&sp, &fp);
                if (ci < 0 || xent_config_fits(&cfg, &fp, NULL, 0)) break;
            }
            sp.off = rand_below(&s, 3) == 0 ? 1 + (int)rand_below(&s, 7) : 0;
            sp.p_ignore = rand_below(&s, 2) ? 0.1 : 0.0;
            sp.ignore_index = rand_below(&s, 4) == 0 ? sp.c / 2 : -100;
            sp.dist = (int)rand_below(&s, 3);
            sp.scale = 1.0f + 2.0f * (float)rand_below(&s, 2);
            sp.offset = (float)rand_below(&s, 11) - 5.0f;
            sp.jitter = 1.0f;
            sp.use_stream = (int)rand_below(&s, 2);
            sp.own_ws = rand_below(&s, 4) == 0;
            sp.quiet = 1;
            sp.cfg = &cfg;
            cfg_ok &= run_check(&sp);
        }
        ran++;
        failed += !cfg_ok;
        if (ran % 200 == 0 || k + 1 == count)
            fprintf(stderr, "%s: %zu/%zu run, %zu failed (%.1f s)\n", label, ran, count, failed, now_s() - t1);
    }
    double t2 = now_s();
    S->sweep_run_s += t2 - t1;
    S->cfg_run += (long)ran;
    S->cfg_failed += (long)failed;
    fprintf(stderr, "%s: %zu configs, %zu compile failures, %zu failed; compile %.1f s, run %.1f s\n", label, count,
            cfail, failed, t1 - t0, t2 - t1);
    free(all);
    free(cfgs);
    free(probs);
    free(rcs);
    ck_assert_msg(cfail == 0, "%zu configs of %s failed to compile", cfail, dt_name(d));
    ck_assert_msg(failed == 0, "%zu of %zu configs of %s failed (details on stderr)", failed, count, dt_name(d));
    ck_assert_msg(S->cfg_spilled == spilled_before, "%ld configs of %s spill (details on stderr)",
                  S->cfg_spilled - spilled_before, dt_name(d));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Timing of the heuristic plan at the reference shape                      */
/* ------------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

START_TEST(test_timing) {
    const int64_t n = 32768, c = 4096;
    spec sp;
    spec_init(&sp, "timing", n, c);
    sp.dist = DIST_UNIFORM;    /* torch.rand, as KernelBench */
    ck_assert(run_check(&sp)); /* the timed plan is right first */

    xent_problem p;
    spec_problem(&sp, &p);
    /* The heuristic's own config, whatever a tune cache in the environment says. */
    xent_config hcfg;
    xent_config_heuristic(&p, G.ctx->info.sm_count, &hcfg);
    xent_plan *plan;
    ck_assert_int_eq(xent_plan_build(G.ctx, &p, &hcfg, XENT_SOURCE_HEURISTIC, &plan), XENT_OK);
    /* Random data, never a constant: uniform [0, 1) logits, uniform targets. */
    float *hl = malloc((size_t)n * (size_t)c * 4);
    int64_t *ht = malloc((size_t)n * 8);
    ck_assert(hl && ht);
    uint64_t r = S->seed | 1;
    for (size_t i = 0; i < (size_t)n * (size_t)c; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        hl[i] = (float)((r >> 40) * 0x1.0p-24);
    }
    for (int64_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ht[i] = (int64_t)(r % (uint64_t)c);
    }
    double ref = NAN;
    ck_assert_int_eq(xent_ref_forward(&p, hl, ht, NULL, &ref, NULL, NULL), XENT_OK);
    CUdeviceptr lg = dalloc((size_t)n * (size_t)c * 4), tg = dalloc((size_t)n * 8), ls = dalloc(4);
    CU(G.drv->MemcpyHtoD(lg, hl, (size_t)n * (size_t)c * 4));
    CU(G.drv->MemcpyHtoD(tg, ht, (size_t)n * 8));
    free(hl);
    free(ht);
    xent_args a = {(const void *)(uintptr_t)lg,
                   (const void *)(uintptr_t)tg,
                   NULL,
                   (float *)(uintptr_t)ls,
                   NULL,
                   NULL,
                   NULL,
                   NULL,
                   NULL};
    CUevent e0, e1;
    CU(G.drv->EventCreate(&e0, CU_EVENT_DEFAULT));
    CU(G.drv->EventCreate(&e1, CU_EVENT_DEFAULT));
    CUstream st = G.stream;
    for (int k = 0; k < 20; k++) ck_assert_int_eq(xent_plan_launch(plan, st, &a), XENT_OK);
    CU(G.drv->StreamSynchronize(st));
    float single[50], b2b[15];
    for (int k = 0; k < 50; k++) {
        CU(G.drv->EventRecord(e0, st));
        ck_assert_int_eq(xent_plan_launch(plan, st, &a), XENT_OK);
        CU(G.drv->EventRecord(e1, st));
        CU(G.drv->EventSynchronize(e1));
        CU(G.drv->EventElapsedTime(&single[k], e0, e1));
    }
    for (int k = 0; k < 15; k++) {
        CU(G.drv->EventRecord(e0, st));
        for (int j = 0; j < 20; j++) ck_assert_int_eq(xent_plan_launch(plan, st, &a), XENT_OK);
        CU(G.drv->EventRecord(e1, st));
        CU(G.drv->EventSynchronize(e1));
        CU(G.drv->EventElapsedTime(&b2b[k], e0, e1));
        b2b[k] /= 20.0f;
    }
    ck_assert_int_eq(xent_check_targets(G.ctx, st), XENT_OK);
    float loss = NAN;
    CU(G.drv->MemcpyDtoH(&loss, ls, 4));
    ck_assert_msg(fabs((double)loss - ref) <= 1e-5 * fabs(ref), "timed launches gave %g, the reference %g",
                  (double)loss, ref);
    qsort(single, 50, sizeof(float), cmp_float);
    qsort(b2b, 15, sizeof(float), cmp_float);
    double us_single = 1e3 * (single[24] + single[25]) / 2, us_b2b = 1e3 * b2b[7];
    ck_assert(us_single > 0 && us_b2b > 0);
    char d[400];
    xent_plan_describe(plan, d, sizeof d);
    S->timed = 1;
    S->t_single_us = us_single;
    S->t_b2b_us = us_b2b;
    snprintf(S->tdesc, sizeof S->tdesc, "%s; %.2f TB/s b2b", d, (double)n * (double)c * 4 / (us_b2b * 1e-6) / 1e12);
    fprintf(stderr, "heuristic 32768x4096 f32: %.1f us/call (b2b), %.1f us single [%s]\n", us_b2b, us_single, S->tdesc);
    G.drv->EventDestroy(e0);
    G.drv->EventDestroy(e1);
    xent_plan_destroy(plan);
    dfree(lg);
    dfree(tg);
    dfree(ls);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Suite, the no-GPU path, the summary                                      */
/* ------------------------------------------------------------------------ */

static Suite *gpu_suite(void) {
    Suite *s = suite_create("gpu");
    struct {
        const char *name;
        double timeout;
    } cases[] = {{"basics", 300},      {"shapes", 600},   {"matrix", 900}, {"semantics", 600},
                 {"determinism", 600}, {"configs", 1800}, {"timing", 300}, {"split", 600}};
    TCase *tc[8];
    for (int k = 0; k < 8; k++) {
        tc[k] = tcase_create(cases[k].name);
        tcase_add_checked_fixture(tc[k], setup, teardown);
        tcase_set_timeout(tc[k], cases[k].timeout);
        /* CK_EXCLUDE_TAGS=sweep runs all but the sweep, CK_INCLUDE_TAGS=sweep only it */
        if (!strcmp(cases[k].name, "configs")) tcase_set_tags(tc[k], "sweep");
        suite_add_tcase(s, tc[k]);
    }
    tcase_add_test(tc[0], test_device_info);
    tcase_add_test(tc[0], test_memo);
    tcase_add_test(tc[0], test_memo_threads);
    tcase_add_loop_test(tc[1], test_shapes, 0, NSHAPES);
    tcase_add_loop_test(tc[2], test_matrix, 0, (int)(sizeof matrix_shapes / sizeof matrix_shapes[0]));
    tcase_add_test(tc[3], test_ignore_index);
    tcase_add_test(tc[3], test_all_ignored);
    tcase_add_test(tc[3], test_large_offsets);
    tcase_add_test(tc[3], test_bad_targets);
    tcase_add_test(tc[3], test_one_block);
    tcase_add_test(tc[3], test_finish_apart);
    tcase_add_test(tc[4], test_determinism);
    tcase_add_test(tc[7], test_split_smoothing);
    tcase_add_loop_test(tc[5], test_sweep, 0, 3);
    tcase_add_test(tc[6], test_timing);
    return s;
}

/* Create a context in a child process (the parent must not initialize CUDA
 * before Check forks the tests): rc and message come back through a pipe. */
static int probe_device(int ordinal, char *why, size_t len) {
    int fds[2];
    if (pipe(fds)) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return XENT_ECUDA;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        return XENT_ECUDA;
    }
    if (pid == 0) {
        close(fds[0]);
        xent_context *ctx = NULL;
        int rc = xent_context_create(&ctx, ordinal);
        char msg[2048];
        int m = snprintf(msg, sizeof msg, "%d %s", rc, rc ? xent_errmsg(ctx) : "");
        ssize_t wr = write(fds[1], msg, m < (int)sizeof msg ? (size_t)m : sizeof msg - 1);
        (void)wr;
        xent_context_destroy(ctx);
        _exit(0);
    }
    close(fds[1]);
    char msg[2048];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    msg[got] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = XENT_ECUDA;
    char *rest = NULL;
    if (got && (rc = (int)strtol(msg, &rest, 10), rest != msg)) {
        snprintf(why, len, "%s", *rest == ' ' ? rest + 1 : rest);
    } else {
        rc = XENT_ECUDA;
        snprintf(why, len, "the probe process died (status %d)", status);
    }
    return rc;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(S, 0, sizeof *S);
    const char *e = getenv("XENT_TEST_SEED");
    S->seed = e && *e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    e = getenv("XENT_TEST_DEVICE");
    G.ordinal = e && *e ? atoi(e) : 0;

    char why[2048];
    int rc = probe_device(G.ordinal, why, sizeof why);
    if (rc == XENT_ENODRIVER || rc == XENT_ENODEVICE) {
        printf("check_gpu: SKIPPED: no GPU (%s: %s)\n", xent_errstr(rc), why);
        printf("check_gpu: this suite needs an NVIDIA GPU and its driver; exiting with status 1 so that "
               "`make test-gpu` never passes without one\n");
        return 1;
    }
    if (rc != XENT_OK) {
        printf("check_gpu: FAILED: cannot create a context on device %d: %s: %s\n", G.ordinal, xent_errstr(rc), why);
        return 1;
    }
    printf("check_gpu: seed 0x%016" PRIx64 " (XENT_TEST_SEED=0x%016" PRIx64 " repeats these inputs)\n", S->seed,
           S->seed);

    double t0 = now_s();
    SRunner *sr = srunner_create(gpu_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);

    printf("gpu: %d shapes x 3 + %ld matrix + %ld other checks = %ld checks (configs included), %ld failed, "
           "max rel err fp32 %.2e, f16 %.2e, bf16 %.2e (worst |out - ref| / scale: %.2e, %.2e, %.2e; tolerance %.0e)\n",
           S->shapes_run, S->matrix_checks, S->checks - S->shape_checks - S->matrix_checks, S->checks, S->failed,
           S->maxerr[0], S->maxerr[1], S->maxerr[2], S->maxelem[0], S->maxelem[1], S->maxelem[2], TOL);
    if (S->cfg_total == 0)
        printf("configs: the sweep of every config did not run (its tag is sweep: CK_INCLUDE_TAGS=sweep)\n");
    else
        printf("configs: %ld run of %ld in the space, %ld failed, %ld failed to compile, %ld spilled (compile %.0f s, "
               "run %.0f s)\n",
               S->cfg_run, S->cfg_total, S->cfg_failed, S->cfg_compile_failed, S->cfg_spilled, S->sweep_compile_s,
               S->sweep_run_s);
    const char *sel[4] = {"XENT_TEST_SWEEP_DTYPES", "XENT_TEST_SWEEP_MATCH", "XENT_TEST_EVERY", "XENT_TEST_OFFSET"};
    for (int k = 0; k < 4; k++)
        if (getenv(sel[k]) && *getenv(sel[k]))
            printf("configs: a partial sweep: %s=%s (%d dtype(s) not run)\n", sel[k], getenv(sel[k]), S->sweep_not_run);
    if (S->timed)
        printf("heuristic 32768x4096 f32: %.1f us/call (b2b), %.1f us single [%s]\n", S->t_b2b_us, S->t_single_us,
               S->tdesc);
    else
        printf("heuristic 32768x4096 f32: not measured\n");
    printf("check_gpu: %d test(s) failed; %.0f s in all\n", failed, now_s() - t0);
    munmap(S, sizeof *S);
    return failed ? 1 : 0;
}
