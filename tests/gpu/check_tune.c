/* check_tune — the tuner end to end on the GPU: small problems are tuned
 * into a fresh cache, the winner is stored with its trials, and a new
 * context then serves that exact configuration from the user cache and
 * computes the right loss with it. Without a GPU it fails (never passes). */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tune/reference.h"
#include "tune/tune.h"

static char db_path[256];

/* store_only: the fastest of the only configs becomes the winner (xent-tune --store-config). */
static void tune_into(const char *path, xent_problem *p, double budget_s, const xent_config *only, int nonly,
                      int store_only, xent_tune_result *r) {
    xent_context *ctx;
    int rc = xent_context_create(&ctx, 0);
    ck_assert_msg(rc == XENT_OK, "%s: %s", xent_errstr(rc), xent_errmsg(ctx));
    tc_db *db;
    char err[512];
    ck_assert_int_eq(tc_open(path, 0, &db, err, sizeof err), XENT_OK);
    xent_tune_opts o;
    xent_tune_opts_init(&o);
    o.budget_s = budget_s;
    o.only = only;
    o.nonly = nonly;
    o.store_only = store_only;
    o.db = db;
    o.settings = "check_tune";
    rc = xent_tune(ctx, p, &o, r);
    ck_assert_msg(rc == XENT_OK, "xent_tune: %s: %s", xent_errstr(rc), xent_errmsg(ctx));
    tc_close(db);
    xent_context_destroy(ctx);
}

/* A new context, reading the cache through $XENT_TUNECACHE, must serve the
 * stored winner and compute the reference's loss with it. */
static void serve_and_check(const xent_problem *p, const xent_config *want) {
    setenv("XENT_TUNECACHE", db_path, 1);
    xent_context *ctx;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    xent_plan *plan;
    ck_assert_int_eq(xent_plan_get(ctx, p, &plan), XENT_OK);
    ck_assert_int_eq(xent_plan_source(plan), XENT_SOURCE_USER_DB);
    ck_assert_mem_eq(&plan->config, want, sizeof *want);

    size_t nl = (size_t)p->n * (size_t)p->c;
    float *hl = malloc(nl * 4);
    int64_t *ht = malloc((size_t)p->n * 8);
    ck_assert(hl && ht);
    for (size_t i = 0; i < nl; i++) hl[i] = (float)((i * 2654435761u) % 1000) / 250.0f;
    for (int64_t i = 0; i < p->n; i++) ht[i] = (i * 7919) % p->c;
    double ref;
    ck_assert_int_eq(xent_ref_forward(p, hl, ht, NULL, &ref, NULL, NULL), XENT_OK);
    const xent_driver *d = ctx->drv;
    int pushed;
    ck_assert_int_eq(xent_ctx_enter(ctx, &pushed), XENT_OK);
    CUdeviceptr lg, tg, ls;
    ck_assert_int_eq(d->MemAlloc(&lg, nl * 4), CUDA_SUCCESS);
    ck_assert_int_eq(d->MemAlloc(&tg, (size_t)p->n * 8), CUDA_SUCCESS);
    ck_assert_int_eq(d->MemAlloc(&ls, 4), CUDA_SUCCESS);
    ck_assert_int_eq(d->MemcpyHtoD(lg, hl, nl * 4), CUDA_SUCCESS);
    ck_assert_int_eq(d->MemcpyHtoD(tg, ht, (size_t)p->n * 8), CUDA_SUCCESS);
    ck_assert_int_eq(d->MemsetD8(ls, 0xff, 4), CUDA_SUCCESS);
    xent_args a = {(void *)lg, (void *)tg, NULL, (float *)ls, NULL, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(xent_plan_launch(plan, NULL, &a), XENT_OK);
    ck_assert_int_eq(xent_check_targets(ctx, NULL), XENT_OK);
    float loss;
    ck_assert_int_eq(d->MemcpyDtoH(&loss, ls, 4), CUDA_SUCCESS);
    ck_assert_msg(fabs(loss - ref) <= 1e-5 * fabs(ref), "served plan gave %g, reference %g", loss, ref);
    d->MemFree(lg);
    d->MemFree(tg);
    d->MemFree(ls);
    xent_ctx_leave(ctx, pushed);
    free(hl);
    free(ht);
    xent_context_destroy(ctx);
}

/* The winner stored in the cache at path for p, as tc_get returns it. */
static int stored_entry(const char *path, const xent_problem *p, tc_entry *e) {
    tc_db *db;
    char err[512];
    ck_assert_int_eq(tc_open(path, 1, &db, err, sizeof err), XENT_OK);
    tc_key key;
    xent_context *ctx;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    xent_tc_key(ctx, p, &key);
    xent_context_destroy(ctx);
    int rc = tc_get(db, &key, e);
    tc_close(db);
    return rc;
}

static void tune_case(int64_t n, int64_t c) {
    xent_problem p;
    xent_problem_init(&p, n, c);
    xent_tune_result r;
    tune_into(db_path, &p, 4, NULL, 0, 0, &r);
    ck_assert_int_eq(r.best.status, TRIAL_OK);
    ck_assert(r.best.us > 0 && r.floor_us > 0 && r.heuristic.us > 0);
    ck_assert(r.best.us <= r.heuristic.us); /* the winner is never slower than the default */
    ck_assert_int_gt(r.timed, 0);
    ck_assert_int_eq(r.failed, 0);
    ck_assert_msg(r.unreached == 0 || r.wall_s > 4, "%d variants reported unreached in a %.1f s tune", r.unreached,
                  r.wall_s);
    printf("check_tune: %lldx%lld: %d candidates, %d timed, %.2f us (heuristic %.2f, floor %.2f), %.1f s\n",
           (long long)n, (long long)c, r.candidates, r.timed, r.best.us, r.heuristic.us, r.floor_us, r.wall_s);

    tc_entry e;
    ck_assert_int_eq(stored_entry(db_path, &p, &e), XENT_OK);
    char cfg[200];
    xent_config_format(&r.best.config, cfg, sizeof cfg);
    ck_assert_str_eq(e.config, cfg);
    ck_assert(fabs(e.us - r.best.us) < 1e-9 * r.best.us);
    char untimed[32];
    snprintf(untimed, sizeof untimed, " untimed=%d", r.unreached);
    ck_assert_msg(strstr(e.settings, untimed), "settings '%s' lack '%s'", e.settings, untimed);
    xent_tune_result_free(&r);
    serve_and_check(&p, &r.best.config);
}

/* A budget the structure stage alone outlasts: the variants it left are
 * counted, so the CLI can say that a larger budget would time them. */
START_TEST(budget_reports_what_it_left) {
    xent_problem p;
    xent_problem_init(&p, 256, 4096);
    xent_tune_result r;
    tune_into(db_path, &p, 1e-3, NULL, 0, 0, &r);
    ck_assert_int_gt(r.timed, 0);
    ck_assert_int_gt(r.unreached, 0);
    ck_assert_int_le(r.ntrials + r.unreached, r.candidates);
    printf("check_tune: 256x4096 at a 1 ms budget: %d timed, %d variants left untimed\n", r.timed, r.unreached);
    xent_tune_result_free(&r);
}
END_TEST

/* Configs given (xent-tune --config): exactly those are timed, each to the
 * end however slow against the heuristic, and their fastest becomes the
 * stored winner only when asked (_i = 1: --store-config). */
START_TEST(given_configs_are_timed_stored_when_asked) {
    xent_problem p;
    xent_problem_init(&p, 512, 1000);
    xent_config given[2];
    char why[256];
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
                                       &given[0], why, sizeof why),
                     XENT_OK);
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=64 BLOCK=64 ITEMS=4 PASSES=2 CACHE=1 TILE=0 SPLIT=1 PERSIST=0",
                                       &given[1], why, sizeof why),
                     XENT_OK);
    char path[300];
    snprintf(path, sizeof path, "%s.given", db_path);
    unlink(path);
    xent_tune_result r;
    tune_into(path, &p, 4, given, 2, _i, &r);
    ck_assert_int_eq(r.candidates, 2);
    ck_assert_int_eq(r.ntrials, 2);
    ck_assert_int_eq(r.timed, 2);
    ck_assert_int_eq(r.failed, 0);
    ck_assert_int_eq(r.best.status, TRIAL_OK);
    ck_assert(!memcmp(&r.best.config, &given[0], sizeof given[0]) ||
              !memcmp(&r.best.config, &given[1], sizeof given[1]));
    xent_config best = r.best.config;
    xent_tune_result_free(&r);
    tc_entry e;
    ck_assert_int_eq(stored_entry(path, &p, &e), _i ? XENT_OK : XENT_ENOTFOUND);
    if (_i) {
        xent_config got;
        ck_assert_int_eq(xent_config_parse(e.config, &got, why, sizeof why), XENT_OK);
        ck_assert(!memcmp(&got, &best, sizeof got));
    }
    unlink(path);
}
END_TEST

/* A row split 128 ways, several rows: far slower than the heuristic's 32
 * ways, but timed when given, and it passes the reference check. */
START_TEST(given_slow_split_is_timed_and_correct) {
    xent_problem p;
    xent_problem_init(&p, 7, 1000003);
    p.reduction = XENT_REDUCE_NONE;
    xent_config given;
    char why[256];
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=128 PERSIST=0",
                                       &given, why, sizeof why),
                     XENT_OK);
    char path[300];
    snprintf(path, sizeof path, "%s.split", db_path);
    unlink(path);
    xent_tune_result r;
    tune_into(path, &p, 4, &given, 1, 0, &r);
    ck_assert_int_eq(r.ntrials, 1);
    ck_assert_msg(r.trials[0].status == TRIAL_OK, "SPLIT=128: %s", r.trials[0].reason);
    ck_assert_int_eq(r.timed, 1);
    xent_tune_result_free(&r);
    unlink(path);
}
END_TEST

/* A full disk at the end of a tune (a file size limit of one byte: every
 * write of the cache fails): the tune fails with XENT_ECACHE and says the
 * winner was not stored, its result is still there to show, and the cache
 * keeps the winner an earlier tune stored, whole. */
START_TEST(full_disk_fails_the_tune_and_keeps_the_cache) {
    char path[300];
    snprintf(path, sizeof path, "%s.full", db_path);
    unlink(path);
    xent_problem early, late;
    xent_problem_init(&early, 512, 1000);
    xent_problem_init(&late, 2048, 4096);
    xent_tune_result r;
    tune_into(path, &early, 2, NULL, 0, 0, &r);
    xent_tune_result_free(&r);
    tc_entry before, after;
    ck_assert_int_eq(stored_entry(path, &early, &before), XENT_OK);

    xent_context *ctx;
    ck_assert_int_eq(xent_context_create(&ctx, 0), XENT_OK);
    tc_db *db;
    char err[512];
    ck_assert_int_eq(tc_open(path, 0, &db, err, sizeof err), XENT_OK);
    xent_tune_opts o;
    xent_tune_opts_init(&o);
    o.budget_s = 2;
    o.db = db;
    struct rlimit old, tiny;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    tiny = (struct rlimit){1, old.rlim_max};
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails instead of killing */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    int rc = xent_tune(ctx, &late, &o, &r);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    ck_assert_msg(rc == XENT_ECACHE, "a tune with a full disk returned %s: %s", xent_errstr(rc), xent_errmsg(ctx));
    ck_assert_msg(strstr(xent_errmsg(ctx), "winner was not stored"), "message: %s", xent_errmsg(ctx));
    ck_assert_int_eq(r.best.status, TRIAL_OK);
    printf("check_tune: full disk: %s (best %.2f us kept in the result)\n", xent_errmsg(ctx), r.best.us);
    xent_tune_result_free(&r);
    tc_close(db);
    xent_context_destroy(ctx);

    ck_assert_int_eq(stored_entry(path, &early, &after), XENT_OK);
    ck_assert_str_eq(after.config, before.config);
    ck_assert(after.us == before.us);
    ck_assert_int_eq(stored_entry(path, &late, &after), XENT_ENOTFOUND);
    unlink(path);
}
END_TEST

START_TEST(tune_small_shapes) {
    tune_case(1000, 10);
    tune_case(256, 4096);
    tune_case(8, 50257);
}
END_TEST

int main(void) {
    xent_context *probe;
    int rc = xent_context_create(&probe, 0);
    if (rc) {
        printf("check_tune: FAILED: no GPU (%s: %s); this suite runs on the GPU machine only\n", xent_errstr(rc),
               xent_errmsg(probe));
        xent_context_destroy(probe);
        return 1;
    }
    xent_context_destroy(probe);
    snprintf(db_path, sizeof db_path, "/tmp/xent_check_tune_%ld.db", (long)getpid());
    unlink(db_path);
    Suite *s = suite_create("tune");
    TCase *tc = tcase_create("end to end");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, tune_small_shapes);
    tcase_add_test(tc, budget_reports_what_it_left);
    tcase_add_loop_test(tc, given_configs_are_timed_stored_when_asked, 0, 2);
    tcase_add_test(tc, given_slow_split_is_timed_and_correct);
    tcase_add_test(tc, full_disk_fails_the_tune_and_keeps_the_cache);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* one process: a GPU context per test is costly */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    unlink(db_path);
    return failed ? 1 : 0;
}
