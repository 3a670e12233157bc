/* check_threads — many threads building and launching plans on one context,
 * against the stand-in driver (tests/standin/libcuda.c): the memo, the
 * tune-cache lookups, NVRTC compiles through the kernel cache, module loads
 * and launches run for real, without a GPU. Under ThreadSanitizer
 * (make BUILD=build-tsan CFLAGS='-O1 -g -fsanitize=thread' LDFLAGS=-fsanitize=thread
 * test-check_threads) it is the race check of that path; in every build it
 * asserts that each problem's plan is built once, every thread gets that
 * plan, and every launch reaches the driver. It also checks what a plan
 * built on the stand-in holds: the training rows' grid and the description.
 *
 * The stand-in is found by re-executing this binary with LD_LIBRARY_PATH
 * naming its folder: the loader reads that variable only at start-up. */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tune/tune.h"
#include "tests/run_suite.h"
#include "tests/tmpdir.h"

#ifndef XENT_STANDIN_DIR
#error "XENT_STANDIN_DIR: the folder of the stand-in libcuda.so.1 (the Makefile sets it)"
#endif

#define MAX_THREADS 16
#define MAX_PROBLEMS 4
#define LAUNCHES 8

typedef void (*counts_fn)(long *launches, long *modules, long *allocs, long *frees);
typedef CUresult (*stream_create_fn)(CUstream *, unsigned);
typedef CUresult (*stream_destroy_fn)(CUstream);

/* One case: threads, and the problems each asks for. A shared case gives
 * every thread the same problems (in an order of its own), an own-shapes
 * case each thread its own; in a mixed case the odd threads also pass a
 * problem and arguments the library must refuse, while the even ones work. */
typedef enum { SHARED, OWN, MIXED } sharing;

typedef struct thread_case {
    const char *name;
    int threads;
    sharing share;
    int nproblems; /* per thread */
    int64_t c[MAX_PROBLEMS];
    xent_dtype dtype[MAX_PROBLEMS];
    xent_op op;
} thread_case;

static const thread_case cases[] = {
    {"16 threads, 4 shared problems",
     16,
     SHARED,
     4,
     {1000, 4096, 32000, 50257},
     {XENT_F32, XENT_BF16, XENT_F32, XENT_BF16},
     XENT_OP_FORWARD},
    {"16 threads, own shapes", 16, OWN, 2, {4096, 50257}, {XENT_F32, XENT_BF16}, XENT_OP_FORWARD},
    {"16 threads, fused gradient, shared", 16, SHARED, 2, {4096, 32000}, {XENT_BF16, XENT_BF16}, XENT_OP_FUSED},
    {"16 threads, refusals among builds", 16, MIXED, 2, {4096, 1000}, {XENT_F32, XENT_F16}, XENT_OP_FORWARD},
};

typedef struct worker {
    const thread_case *tc;
    int index;
    xent_context *ctx;
    stream_create_fn stream_create;
    stream_destroy_fn stream_destroy;
    xent_plan *plans[MAX_PROBLEMS]; /* by problem index, whatever order they were asked in */
    int launched;
    char failure[256];
} worker;

static _Alignas(16) unsigned char device_buf[1 << 16]; /* the stand-in never reads through these */

static void problem_of(const worker *w, int k, xent_problem *p) {
    const thread_case *tc = w->tc;
    /* own shapes: rows differ per thread, so every thread's problems are its own */
    int64_t n = tc->share == OWN ? 256 + 64 * w->index : 512;
    xent_problem_init(p, n, tc->c[k]);
    p->logits = tc->dtype[k];
    p->op = tc->op;
}

/* A symbol of the loaded stand-in driver, which only it exports. */
static void *standin_symbol(const char *name) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(lib, "libcuda.so.1 is not loaded");
    void *sym = dlsym(lib, name);
    ck_assert_msg(sym, "the loaded libcuda.so.1 has no %s: not the stand-in", name);
    return sym;
}

/* A launch's arguments on the stand-in, which never reads through them; fused ops write a gradient. */
static xent_args standin_args(xent_op op, void *ws) {
    xent_args a = {.logits = device_buf, .targets = device_buf, .loss = (float *)device_buf, .workspace = ws};
    if (op == XENT_OP_FUSED) a.grad = device_buf + 4096;
    return a;
}

#define FAIL(w, ...) (snprintf((w)->failure, sizeof(w)->failure, __VA_ARGS__), (void *)0)

static void *work(void *arg) {
    worker *w = arg;
    const thread_case *tc = w->tc;
    CUstream stream = NULL;
    if (w->stream_create(&stream, 1 /* non-blocking */) != CUDA_SUCCESS) return FAIL(w, "no stream");
    for (int j = 0; j < tc->nproblems; j++) {
        int k = (j + w->index) % tc->nproblems; /* each thread its own order */
        xent_problem p;
        problem_of(w, k, &p);
        if (tc->share == MIXED && w->index % 2) {
            xent_problem bad = p;
            bad.c = 0;
            xent_plan *none = (xent_plan *)1;
            if (xent_plan_get(w->ctx, &bad, &none) != XENT_EINVAL || none)
                return FAIL(w, "thread %d: c = 0 was not refused", w->index);
            /* the message is this thread's, whatever the others failed with meanwhile */
            if (!strstr(xent_errmsg(w->ctx), "problem: c must be >= 1"))
                return FAIL(w, "thread %d: refused c = 0, message '%.200s'", w->index, xent_errmsg(w->ctx));
        }
        int rc = xent_plan_get(w->ctx, &p, &w->plans[k]);
        if (rc) return FAIL(w, "thread %d: xent_plan_get: %s", w->index, xent_errstr(rc));
        size_t ws_size = xent_workspace_size(w->plans[k]);
        void *ws = aligned_alloc(16, (ws_size + 15) & ~(size_t)15);
        if (!ws) return FAIL(w, "no workspace");
        xent_args a = standin_args(tc->op, ws);
        for (int l = 0; l < LAUNCHES; l++) {
            if (tc->share == MIXED && w->index % 2) {
                xent_args skew = a;
                skew.loss = (float *)(device_buf + 1);
                if (xent_plan_launch(w->plans[k], stream, &skew) != XENT_EINVAL ||
                    !strstr(xent_errmsg(w->ctx), "4-byte aligned")) {
                    free(ws);
                    return FAIL(w, "thread %d: a misaligned loss: '%.200s'", w->index, xent_errmsg(w->ctx));
                }
            }
            if ((rc = xent_plan_launch(w->plans[k], stream, &a))) {
                free(ws);
                return FAIL(w, "thread %d: xent_plan_launch: %s", w->index, xent_errstr(rc));
            }
            w->launched++;
        }
        free(ws);
    }
    w->stream_destroy(stream);
    return NULL;
}

static void run_case(const thread_case *tc) {
    setenv("XENT_TUNECACHE", tpath("tune.db"), 1);
    xent_context *ctx = NULL;
    int rc = xent_context_create(&ctx, 0);
    ck_assert_msg(rc == XENT_OK, "stand-in context: %s: %s", xent_errstr(rc), xent_errmsg(ctx));
    counts_fn counts = (counts_fn)standin_symbol("standin_counts");
    long launches0, modules0, launches, modules, allocs, frees;
    counts(&launches0, &modules0, NULL, NULL);
    long (*programmatic)(void) = (long (*)(void))standin_symbol("standin_programmatic");
    long dependents0 = programmatic();

    static worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < tc->threads; i++) {
        w[i] = (worker){.tc = tc, .index = i, .ctx = ctx};
        w[i].stream_create = (stream_create_fn)standin_symbol("cuStreamCreate");
        w[i].stream_destroy = (stream_destroy_fn)standin_symbol("cuStreamDestroy_v2");
        ck_assert_int_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < tc->threads; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < tc->threads; i++) ck_assert_msg(!w[i].failure[0], "%s", w[i].failure);

    /* Each distinct problem has one plan, the one every thread was given. */
    int distinct = tc->share == OWN ? tc->threads * tc->nproblems : tc->nproblems;
    long want_launches = 0, apart = 0;
    for (int i = 0; i < tc->threads; i++) {
        want_launches += w[i].launched;
        for (int k = 0; k < tc->nproblems; k++) {
            char desc[XENT_DESCRIBE_LEN];
            ck_assert_int_eq(xent_plan_describe(w[i].plans[k], desc, sizeof desc), XENT_OK);
            apart += strstr(desc, "finish=apart") ? LAUNCHES : 0;
            xent_problem p;
            xent_plan *found = NULL;
            problem_of(&w[i], k, &p);
            ck_assert_int_eq(xent_plan_lookup(ctx, &p, &found), XENT_OK);
            ck_assert_msg(found == w[i].plans[k], "thread %d, problem %d: not the context's plan", i, k);
            if (tc->share != OWN)
                ck_assert_msg(w[i].plans[k] == w[0].plans[k], "thread %d, problem %d: a second plan", i, k);
        }
    }
    ck_assert_int_eq(want_launches, (long)tc->threads * tc->nproblems * LAUNCHES);
    counts(&launches, &modules, &allocs, &frees);
    ck_assert_int_eq(modules - modules0, distinct);
    /* a mean's gradient launches the weight-sum kernel first: two driver launches a call; a large
     * forward mean launches xent_fwd_finish after its rows (finish=apart) */
    long per_call = tc->op == XENT_OP_FUSED ? 2 : 1;
    ck_assert_int_eq(launches - launches0, per_call * want_launches + apart);
    /* on sm_90 the rows' kernel is a programmatic dependent of the weight sums', and so is xent_fwd_finish of
     * the rows' */
    ck_assert_int_eq(programmatic() - dependents0, (tc->op == XENT_OP_FUSED ? want_launches : 0) + apart);
    xent_context_destroy(ctx);
    counts(NULL, NULL, &allocs, &frees);
    ck_assert_msg(allocs == frees, "%ld device allocations, %ld frees", allocs, frees);
    fprintf(stderr, "%s: %d plans, %ld launches, %ld modules loaded\n", tc->name, distinct, launches - launches0,
            modules - modules0);
}

START_TEST(test_shared) { run_case(&cases[0]); }
END_TEST
START_TEST(test_own_shapes) { run_case(&cases[1]); }
END_TEST
START_TEST(test_fused_shared) { run_case(&cases[2]); }
END_TEST
START_TEST(test_refusals_among_builds) { run_case(&cases[3]); }
END_TEST

/* The tuner's compile path: 16 threads compile 16 configs, four of them
 * each asked for four times, through the kernel cache (memory and disk) at
 * once; duplicates must come back byte for byte the same CUBIN. */
START_TEST(test_compile_many) {
    setenv("XENT_KERNEL_CACHE", tpath("kernels"), 1);
    xent_problem p;
    xent_problem_init(&p, 4096, 4096);
    xent_config distinct[4], cfgs[16];
    int got = (int)xent_space_enumerate(XENT_F32, &p, 132, NULL, 0);
    ck_assert_int_ge(got, 4);
    xent_config *all = calloc((size_t)got, sizeof *all);
    ck_assert(all);
    xent_space_enumerate(XENT_F32, &p, 132, all, (size_t)got);
    for (int k = 0; k < 4; k++) distinct[k] = all[k * (got / 4)];
    free(all);
    for (int i = 0; i < 16; i++) cfgs[i] = distinct[i % 4];
    int status[16];
    xent_cubin bins[16];
    static char errs[16][512];
    memset(bins, 0, sizeof bins);
    xent_compile_many(cfgs, 16, &p, 1, 90, 16, status, bins, errs);
    for (int i = 0; i < 16; i++) {
        ck_assert_msg(status[i] == XENT_OK, "config %d: %s", i, errs[i]);
        ck_assert_uint_gt(bins[i].size, 1000);
        ck_assert_msg(bins[i].size == bins[i % 4].size && !memcmp(bins[i].data, bins[i % 4].data, bins[i].size),
                      "config %d: a different CUBIN from its duplicate", i);
    }
    for (int i = 0; i < 16; i++) xent_cubin_free(&bins[i]);
}
END_TEST

/* A launch the driver refuses, at each launch of a plan: the call returns XENT_ECUDA with a message
 * that names the driver call that failed, and the plan launches again once the driver takes it. */
typedef struct launch_fault {
    const char *name;
    xent_op op;
    int64_t n, c;     /* fp32 logits */
    int entry;        /* the stand-in entry point that fails: 1 cuLaunchKernel, 2 cuLaunchKernelEx */
    const char *call; /* the message's start */
    int apart;        /* whether the plan launches xent_fwd_finish after its rows */
} launch_fault;

static const launch_fault faults[] = {
    {"a forward's rows", XENT_OP_FORWARD, 512, 4096, 1, "cuLaunchKernel failed", 0},
    {"a forward's finish (64 MB of logits)", XENT_OP_FORWARD, 4096, 4096, 2, "cuLaunchKernelEx failed", 1},
    {"a gradient's weight sums", XENT_OP_FUSED, 512, 4096, 1, "cuLaunchKernel failed", 0},
    {"a gradient's rows", XENT_OP_FUSED, 512, 4096, 2, "cuLaunchKernelEx failed", 0},
};

START_TEST(test_launch_fault) {
    const launch_fault *f = &faults[_i];
    setenv("XENT_TUNECACHE", tpath("tune.db"), 1);
    xent_context *ctx = NULL;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    void (*fail_next)(int) = (void (*)(int))standin_symbol("standin_fail_next_launch");
    xent_problem p;
    xent_problem_init(&p, f->n, f->c);
    p.op = f->op;
    xent_plan *plan = NULL;
    ck_assert_int_eq(xent_plan_get(ctx, &p, &plan), XENT_OK);
    char desc[XENT_DESCRIBE_LEN];
    ck_assert_int_eq(xent_plan_describe(plan, desc, sizeof desc), XENT_OK);
    ck_assert_msg((strstr(desc, "finish=apart") != NULL) == f->apart, "%s: plan %s", f->name, desc);
    void *ws = aligned_alloc(16, (xent_workspace_size(plan) + 15) & ~(size_t)15);
    ck_assert(ws);
    xent_args a = standin_args(f->op, ws);
    fail_next(f->entry);
    int rc = xent_plan_launch(plan, NULL, &a);
    fail_next(0);
    ck_assert_msg(rc == XENT_ECUDA, "%s: a refused launch gave %s", f->name, xent_errstr(rc));
    const char *msg = xent_errmsg(ctx);
    ck_assert_msg(!strncmp(msg, f->call, strlen(f->call)) && strstr(msg, "CUDA_ERROR_STANDIN"), "%s: '%s'", f->name,
                  msg);
    rc = xent_plan_launch(plan, NULL, &a);
    ck_assert_msg(rc == XENT_OK, "%s: the launch after: %s: %s", f->name, xent_errstr(rc), xent_errmsg(ctx));
    free(ws);
    xent_context_destroy(ctx);
}
END_TEST

/* The rows' grid: eight rounds of the resident blocks for a sum or mean of rows held in
 * registers and for the backward, sixteen for fused rows where no partial arrives (none) or a
 * block's row is stashed. The stand-in holds 2048 / BLOCK blocks an SM (at most 8, one past 100 KB
 * of shared memory) on 132 SMs. */
typedef struct rounds_case {
    const char *name;
    xent_op op;
    xent_reduction reduction;
    int64_t n, c;
    const char *config;
    long long resident, rounds;
} rounds_case;

#define HELD_1024 "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0"
#define STASHED_128256 "VEC=8 TPR=512 BLOCK=512 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=2 STASH=1"
static const rounds_case rounds_cases[] = {
    {"fused mean, held", XENT_OP_FUSED, XENT_REDUCE_MEAN, 262144, 1024, HELD_1024, 132 * 8, 8},
    {"fused sum, held", XENT_OP_FUSED, XENT_REDUCE_SUM, 262144, 1024, HELD_1024, 132 * 8, 8},
    {"fused none, held", XENT_OP_FUSED, XENT_REDUCE_NONE, 262144, 1024, HELD_1024, 132 * 8, 16},
    {"fused mean, stashed", XENT_OP_FUSED, XENT_REDUCE_MEAN, 8192, 128256, STASHED_128256, 132, 16},
    {"backward mean", XENT_OP_BACKWARD, XENT_REDUCE_MEAN, 262144, 1024, HELD_1024, 132 * 8, 8},
    {"backward none", XENT_OP_BACKWARD, XENT_REDUCE_NONE, 262144, 1024, HELD_1024, 132 * 8, 8},
};

START_TEST(test_rows_rounds) {
    const rounds_case *t = &rounds_cases[_i];
    setenv("XENT_TUNECACHE", tpath("tune.db"), 1);
    xent_context *ctx = NULL;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    xent_problem p;
    xent_problem_init(&p, t->n, t->c);
    p.logits = XENT_BF16;
    p.op = t->op;
    p.reduction = t->reduction;
    xent_config cfg;
    ck_assert_int_eq(xent_config_parse(t->config, &cfg, NULL, 0), XENT_OK);
    xent_plan *plan = NULL;
    int rc = xent_plan_build(ctx, &p, &cfg, XENT_SOURCE_EXPLICIT, &plan);
    ck_assert_msg(rc == XENT_OK, "%s: %s: %s", t->name, xent_errstr(rc), xent_errmsg(ctx));
    ck_assert_msg(plan->grid == t->resident * t->rounds, "%s: grid %u, want %lld rounds of %lld", t->name, plan->grid,
                  t->rounds, t->resident);
    xent_plan_destroy(plan);
    xent_context_destroy(ctx);
}
END_TEST

/* Long notes, an unreadable user cache's and a long folder searched for shipped
 * caches in vain, fit XENT_DESCRIBE_LEN; a buffer too short for the text is refused. */
START_TEST(test_describe_fits) {
    char datadir[300], *at = datadir + snprintf(datadir, sizeof datadir, "%s/", tmpdir);
    while (at < datadir + sizeof datadir - 8) at += snprintf(at, (size_t)(datadir + sizeof datadir - at), "nowhere/");
    setenv("XENT_DATADIR", datadir, 1);
    FILE *f = fopen(tpath("tune.db"), "w");
    ck_assert(f && fputs("not an SQLite database\n", f) >= 0 && fclose(f) == 0);
    setenv("XENT_TUNECACHE", tpath("tune.db"), 1);
    xent_context *ctx = NULL;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    xent_problem p;
    xent_problem_init(&p, 64, 1000);
    xent_plan *plan = NULL;
    ck_assert_int_eq(xent_plan_get(ctx, &p, &plan), XENT_OK);
    char desc[XENT_DESCRIBE_LEN], shorter[64];
    ck_assert_int_eq(xent_plan_describe(plan, desc, sizeof desc), XENT_OK);
    ck_assert_msg(strstr(desc, " source=heuristic ") && strstr(desc, "note=user tune cache skipped: ") &&
                      strstr(desc, "; no readable shipped tune cache for ") && strstr(desc, datadir),
                  "%s", desc);
    ck_assert_int_eq(xent_plan_describe(plan, shorter, sizeof shorter), XENT_EINVAL);
    ck_assert_msg(!strncmp(desc, shorter, sizeof shorter - 1), "cut short: '%s' of '%s'", shorter, desc);
    xent_context_destroy(ctx);
    unsetenv("XENT_DATADIR");
}
END_TEST

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/xent-threads-XXXXXX");
    ck_assert(mkdtemp(tmpdir));
}

int main(int argc, char **argv) {
    (void)argc;
    if (!getenv("XENT_STANDIN_ACTIVE")) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char path[4096];
        snprintf(path, sizeof path, "%s%s%s", XENT_STANDIN_DIR, old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("XENT_STANDIN_ACTIVE", "1", 1);
        execv("/proc/self/exe", argv);
        perror("check_threads: re-executing with the stand-in driver");
        return EXIT_FAILURE;
    }
    const scratch_test tests[] = {
        {"threads", 600, test_shared},       {"threads", 600, test_own_shapes},
        {"threads", 600, test_fused_shared}, {"threads", 600, test_refusals_among_builds},
        {"threads", 600, test_compile_many}, {"threads", 600, test_describe_fits},
    };
    Suite *s = suite_create("threads");
    add_scratch_tests(s, tests, sizeof tests / sizeof tests[0], make_tmpdir, NULL);
    TCase *tc = tcase_create("launch faults");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_launch_fault, 0, (int)(sizeof faults / sizeof faults[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("grid");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_rows_rounds, 0, (int)(sizeof rounds_cases / sizeof rounds_cases[0]));
    suite_add_tcase(s, tc);
    return run_suite(s);
}
