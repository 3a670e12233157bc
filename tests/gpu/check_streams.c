/* check_streams — threads on one context, each on its own stream with its
 * own workspace and its own problem, launching at once: every launch's
 * outputs must equal, bit for bit, those of a serial run of the same plans
 * (the legacy stream, the plan's own workspace), and the serial run must
 * agree with the float64 reference. The threads build their plans
 * themselves, at the same time, so the memo's build path runs concurrently
 * with other threads' launches.
 *
 * Sizes: 16 threads (XENT_TEST_THREADS, at most 16), 20 launches each
 * (XENT_TEST_ROUNDS), each launch's outputs read back and compared; the
 * problems below, from one row to 1M rows and from 10 to 262144 classes, f32
 * and bf16, every reduction, weights, smoothing, lse, ignored rows, split
 * rows. Without a GPU it says so and exits with status 1 (never a pass). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"
#include "tests/files.h"
#include "tests/rand.h"
#include "tune/reference.h"

#define MAX_THREADS 16

typedef struct stream_case {
    int64_t n, c;
    xent_dtype dt;
    xent_reduction red;
    int weights, lse;
    float smoothing;
} stream_case;

static const stream_case cases[MAX_THREADS] = {
    {4096, 4096, XENT_F32, XENT_REDUCE_MEAN, 0, 0, 0},    {1024, 50257, XENT_BF16, XENT_REDUCE_MEAN, 0, 0, 0},
    {64, 262144, XENT_F32, XENT_REDUCE_SUM, 0, 0, 0},   /* few long rows: split */
    {1048576, 10, XENT_F32, XENT_REDUCE_NONE, 0, 0, 0}, /* many tiny rows */
    {8, 50257, XENT_F32, XENT_REDUCE_MEAN, 0, 1, 0},      {3000, 1000, XENT_BF16, XENT_REDUCE_SUM, 1, 0, 0},
    {513, 32000, XENT_F32, XENT_REDUCE_MEAN, 0, 0, 0.1f}, {2, 131073, XENT_F32, XENT_REDUCE_MEAN, 1, 1, 0},
    {1, 262144, XENT_BF16, XENT_REDUCE_SUM, 0, 0, 0}, /* one row: all the GPU on it */
    {31, 31, XENT_F32, XENT_REDUCE_NONE, 0, 1, 0.2f},     {100000, 128, XENT_BF16, XENT_REDUCE_MEAN, 0, 0, 0},
    {16384, 4096, XENT_BF16, XENT_REDUCE_NONE, 0, 1, 0},  {777, 5000, XENT_F32, XENT_REDUCE_MEAN, 1, 1, 0.1f},
    {256, 65536, XENT_BF16, XENT_REDUCE_SUM, 0, 0, 0},    {12345, 100, XENT_F32, XENT_REDUCE_MEAN, 1, 0, 0},
    {48, 128256, XENT_BF16, XENT_REDUCE_MEAN, 0, 1, 0},
};

/* One thread's problem: host inputs, device buffers, its plan and what its launches gave. */
typedef struct job {
    int index;
    xent_problem p;
    void *logits; /* host: f32, or bf16 bits */
    int64_t *targets;
    float *weights;
    size_t logit_bytes, nloss;
    CUdeviceptr d_logits, d_targets, d_weights, d_loss, d_lse;
    xent_plan *plan;
    float *loss, *lse; /* the first threaded launch's outputs */
    float *serial_loss, *serial_lse;
    int rounds, mismatches;
    char failure[512];
} job;

static struct {
    xent_context *ctx;
    int threads, rounds;
    pthread_barrier_t start;
} G;

static void make_inputs(job *j, const stream_case *k) {
    xent_problem_init(&j->p, k->n, k->c);
    j->p.logits = k->dt;
    j->p.reduction = k->red;
    j->p.has_weights = k->weights;
    j->p.write_lse = k->lse;
    j->p.label_smoothing = k->smoothing;
    uint64_t seed = 0x5eed0000ull + (uint64_t)j->index * 7919;
    size_t count = (size_t)k->n * (size_t)k->c, esize = k->dt == XENT_F32 ? 4 : 2;
    j->logit_bytes = count * esize;
    j->logits = malloc(j->logit_bytes);
    j->targets = malloc((size_t)k->n * sizeof *j->targets);
    j->weights = k->weights ? malloc((size_t)k->c * sizeof *j->weights) : NULL;
    ck_assert(j->logits && j->targets && (!k->weights || j->weights));
    for (size_t i = 0; i < count; i++) {
        float v = (float)(urand(&seed) * 8.0 - 4.0);
        if (k->dt == XENT_F32) {
            ((float *)j->logits)[i] = v;
        } else {
            uint32_t bits;
            memcpy(&bits, &v, 4);
            ((uint16_t *)j->logits)[i] = (uint16_t)(bits >> 16);
        }
    }
    for (int64_t i = 0; i < k->n; i++) /* about one row in 16 ignored */
        j->targets[i] = splitmix(&seed) % 16 == 0 ? -100 : (int64_t)(splitmix(&seed) % (uint64_t)k->c);
    for (int64_t i = 0; k->weights && i < k->c; i++) j->weights[i] = (float)(0.25 + urand(&seed));
    j->nloss = k->red == XENT_REDUCE_NONE ? (size_t)k->n : 1;
    j->loss = malloc(j->nloss * 4);
    j->serial_loss = malloc(j->nloss * 4);
    j->lse = k->lse ? malloc((size_t)k->n * 4) : NULL;
    j->serial_lse = k->lse ? malloc((size_t)k->n * 4) : NULL;
    ck_assert(j->loss && j->serial_loss && (!k->lse || (j->lse && j->serial_lse)));
}

static CUresult upload(job *j) {
    const xent_driver *d = G.ctx->drv;
    CUresult r;
    size_t nt = (size_t)j->p.n * 8;
    if ((r = d->MemAlloc(&j->d_logits, j->logit_bytes)) || (r = d->MemAlloc(&j->d_targets, nt)) ||
        (r = d->MemAlloc(&j->d_loss, j->nloss * 4)) ||
        (j->p.write_lse && (r = d->MemAlloc(&j->d_lse, (size_t)j->p.n * 4))) ||
        (j->p.has_weights && (r = d->MemAlloc(&j->d_weights, (size_t)j->p.c * 4))))
        return r;
    if ((r = d->MemcpyHtoD(j->d_logits, j->logits, j->logit_bytes)) ||
        (r = d->MemcpyHtoD(j->d_targets, j->targets, nt)))
        return r;
    if (j->p.has_weights) r = d->MemcpyHtoD(j->d_weights, j->weights, (size_t)j->p.c * 4);
    return r;
}

static xent_args args_of(const job *j, CUdeviceptr ws) {
    xent_args a = {(const void *)j->d_logits,
                   (const void *)j->d_targets,
                   (const float *)j->d_weights,
                   (float *)j->d_loss,
                   (float *)j->d_lse,
                   (void *)ws,
                   NULL,
                   NULL,
                   NULL};
    return a;
}

/* Launch once on stream with workspace ws (0: the plan's own) and read the
 * outputs into loss and lse; the outputs are set to NaN bytes first, so a
 * launch that writes nothing cannot pass for one that wrote the old values. */
static const char *launch_and_read(job *j, CUstream st, CUdeviceptr ws, float *loss, float *lse) {
    const xent_driver *d = G.ctx->drv;
    if (d->MemsetD8Async(j->d_loss, 0xff, j->nloss * 4, st)) return "memset loss";
    if (j->p.write_lse && d->MemsetD8Async(j->d_lse, 0xff, (size_t)j->p.n * 4, st)) return "memset lse";
    xent_args a = args_of(j, ws);
    if (xent_plan_launch(j->plan, st, &a)) return xent_errmsg(G.ctx);
    if (d->MemcpyDtoHAsync(loss, j->d_loss, j->nloss * 4, st)) return "read loss";
    if (j->p.write_lse && d->MemcpyDtoHAsync(lse, j->d_lse, (size_t)j->p.n * 4, st)) return "read lse";
    if (d->StreamSynchronize(st)) return "cuStreamSynchronize";
    return NULL;
}

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

static void *threaded(void *arg) {
    job *j = arg;
    const xent_driver *d = G.ctx->drv;
    int pushed;
    CUstream st = NULL;
    CUdeviceptr ws = 0;
    float *loss = malloc(j->nloss * 4), *lse = j->p.write_lse ? malloc((size_t)j->p.n * 4) : NULL;
    const char *why = NULL;
    if (xent_ctx_enter(G.ctx, &pushed)) {
        snprintf(j->failure, sizeof j->failure, "thread %d: cannot enter the context", j->index);
        pthread_barrier_wait(&G.start);
        return NULL;
    }
    /* every thread builds its own plan, at once with the others */
    pthread_barrier_wait(&G.start);
    int rc = xent_plan_get(G.ctx, &j->p, &j->plan);
    if (rc) why = xent_errmsg(G.ctx);
    size_t ws_size = rc ? 0 : xent_workspace_size(j->plan);
    if (!why && (!loss || (j->p.write_lse && !lse))) why = "host memory";
    if (!why && d->StreamCreate(&st, CU_STREAM_NON_BLOCKING)) why = "cuStreamCreate";
    if (!why && d->MemAlloc(&ws, ws_size)) why = "cuMemAlloc(workspace)";
    /* a caller's workspace is zeroed once before first use */
    if (!why && (d->MemsetD8Async(ws, 0, ws_size, st) || d->StreamSynchronize(st))) why = "zeroing the workspace";
    for (int r = 0; !why && r < G.rounds; r++) {
        float *out = r ? loss : j->loss, *out_lse = r ? lse : j->lse;
        if ((why = launch_and_read(j, st, ws, out, out_lse))) break;
        if (r && (!same_bits(loss, j->loss, j->nloss) || (lse && !same_bits(lse, j->lse, (size_t)j->p.n))))
            j->mismatches++;
        j->rounds++;
    }
    if (why)
        snprintf(j->failure, sizeof j->failure, "thread %d (%lldx%lld): %s", j->index, (long long)j->p.n,
                 (long long)j->p.c, why);
    if (ws) d->MemFree(ws);
    if (st) d->StreamDestroy(st);
    xent_ctx_leave(G.ctx, pushed);
    free(loss);
    free(lse);
    return NULL;
}

/* The serial run's outputs against the float64 reference: each loss within
 * 1e-5 of the scale max(|ref|, |lse|, 1) of its row (sum and mean: of the
 * rows' mean scale), each lse within 1e-5 of max(|lse|, 1). check_gpu holds
 * the tight per-case bounds; this only says the serial run is right. */
static void check_reference(const job *j) {
    const xent_problem *p = &j->p;
    double *ref = malloc(j->nloss * sizeof *ref), *lse = malloc((size_t)p->n * sizeof *lse);
    ck_assert(ref && lse);
    ck_assert_int_eq(xent_ref_forward(p, j->logits, j->targets, j->weights, ref, lse, NULL), XENT_OK);
    double scale = 1;
    for (int64_t i = 0; i < p->n; i++) scale = fmax(scale, fabs(lse[i]));
    for (size_t i = 0; i < j->nloss; i++) {
        double s = fmax(fabs(ref[i]), p->reduction == XENT_REDUCE_NONE ? fmax(fabs(lse[i]), 1) : scale);
        if (p->reduction == XENT_REDUCE_SUM) s *= (double)p->n * (p->has_weights ? 1.25 : 1);
        ck_assert_msg(fabs(j->serial_loss[i] - ref[i]) <= 1e-5 * s,
                      "case %d (%lldx%lld) loss[%zu]: %.9g, reference %.9g", j->index, (long long)p->n, (long long)p->c,
                      i, j->serial_loss[i], ref[i]);
    }
    for (int64_t i = 0; p->write_lse && i < p->n; i++)
        ck_assert_msg(fabs(j->serial_lse[i] - lse[i]) <= 1e-5 * fmax(fabs(lse[i]), 1),
                      "case %d lse[%lld]: %.9g, reference %.9g", j->index, (long long)i, j->serial_lse[i], lse[i]);
    free(ref);
    free(lse);
}

START_TEST(test_threads_equal_serial) {
    static job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    memset(jobs, 0, sizeof jobs);
    int pushed;
    ck_assert_int_eq(xent_ctx_enter(G.ctx, &pushed), XENT_OK);
    for (int i = 0; i < G.threads; i++) {
        jobs[i].index = i;
        make_inputs(&jobs[i], &cases[i]);
        CUresult r = upload(&jobs[i]);
        ck_assert_msg(r == CUDA_SUCCESS, "case %d: upload failed (%d)", i, (int)r);
    }
    ck_assert_int_eq(pthread_barrier_init(&G.start, NULL, (unsigned)G.threads), 0);
    double t0 = now_s();
    for (int i = 0; i < G.threads; i++) ck_assert_int_eq(pthread_create(&tid[i], NULL, threaded, &jobs[i]), 0);
    for (int i = 0; i < G.threads; i++) pthread_join(tid[i], NULL);
    double t_threads = now_s() - t0;
    pthread_barrier_destroy(&G.start);
    for (int i = 0; i < G.threads; i++) ck_assert_msg(!jobs[i].failure[0], "%s", jobs[i].failure);

    /* serially: the same plans, the legacy stream, the plans' own workspaces */
    t0 = now_s();
    long launches = 0;
    for (int i = 0; i < G.threads; i++) {
        job *j = &jobs[i];
        const char *why = launch_and_read(j, NULL, 0, j->serial_loss, j->serial_lse);
        ck_assert_msg(!why, "serial case %d: %s", i, why);
        ck_assert_msg(j->mismatches == 0, "case %d: %d of %d threaded launches differed from its first", i,
                      j->mismatches, j->rounds);
        ck_assert_int_eq(j->rounds, G.rounds);
        ck_assert_msg(same_bits(j->loss, j->serial_loss, j->nloss),
                      "case %d (%lldx%lld): threaded loss %.9g, serial %.9g", i, (long long)j->p.n, (long long)j->p.c,
                      j->loss[0], j->serial_loss[0]);
        ck_assert_msg(!j->p.write_lse || same_bits(j->lse, j->serial_lse, (size_t)j->p.n),
                      "case %d: threaded lse differs from the serial run", i);
        check_reference(j);
        launches += j->rounds;
    }
    double t_serial = now_s() - t0;
    xent_ctx_leave(G.ctx, pushed);
    printf("check_streams: %d threads, each its own stream, workspace and problem: %ld launches, each equal bit for "
           "bit to the serial run (threads %.2f s with plan builds, serial checks %.2f s)\n",
           G.threads, launches, t_threads, t_serial);
    for (int i = 0; i < G.threads; i++) {
        job *j = &jobs[i];
        const xent_driver *d = G.ctx->drv;
        d->MemFree(j->d_logits);
        d->MemFree(j->d_targets);
        d->MemFree(j->d_loss);
        if (j->d_lse) d->MemFree(j->d_lse);
        if (j->d_weights) d->MemFree(j->d_weights);
        free(j->logits), free(j->targets), free(j->weights);
        free(j->loss), free(j->lse), free(j->serial_loss), free(j->serial_lse);
    }
}
END_TEST

static int env_int(const char *name, int def, int lo, int hi) {
    const char *e = getenv(name);
    int v = e && *e ? atoi(e) : def;
    return v < lo ? lo : v > hi ? hi : v;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = xent_context_create(&G.ctx, env_int("XENT_TEST_DEVICE", 0, 0, 1024));
    if (rc) {
        printf("check_streams: FAILED: no GPU (%s: %s); this suite runs on the GPU machine only\n", xent_errstr(rc),
               xent_errmsg(G.ctx));
        xent_context_destroy(G.ctx);
        return 1;
    }
    G.threads = env_int("XENT_TEST_THREADS", MAX_THREADS, 1, MAX_THREADS);
    G.rounds = env_int("XENT_TEST_ROUNDS", 20, 1, 100000);
    Suite *s = suite_create("streams");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_threads_equal_serial);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* the context is made before: no CUDA across a fork */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    xent_context_destroy(G.ctx);
    return failed ? 1 : 0;
}
