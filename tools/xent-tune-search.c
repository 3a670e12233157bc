/*
 * xent-tune-search.c — the tune itself: the device, the search, its table or
 * JSON, the winner stored.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/files.h"
#include "gen/gen.h"
#include "tools/json.h"
#include "tools/xent-tune.h"
#include "tune/tune.h"

#include "tools/xent-tune-cli.h"

static int check_gpu(const cli *o, const xent_device_info *info) {
    if (!named_gpu(o)) return 0;
    const xent_gpu_spec *g = xent_gpu_find(o->gpu);
    int cc = info->cc_major * 10 + info->cc_minor, sm_ok = !g;
    for (int i = 0; g && i < 3 && g->sms[i]; i++) sm_ok |= g->sms[i] == info->sm_count;
    if (strcmp(info->key, o->gpu) || (g && g->cc != cc) || !sm_ok) {
        fprintf(stderr,
                "%s: the GPU present is %s (key %s, sm_%d, %d SMs), not %s%s; refusing to store entries for it\n", PROG,
                info->name, info->key, cc, info->sm_count, o->gpu, g ? "" : " (unknown key)");
        return EXIT_DEVICE;
    }
    return 0;
}

static void config_text(const xent_config *c, char *buf, size_t len) { xent_config_format(c, buf, len); }

/* Why a search ended with no winner, by what became of its candidates. */
static void no_winner_reason(const xent_tune_result *r, char *why, size_t cap) {
    int n[TRIAL_PRUNED + 1] = {0};
    for (int i = 0; i < r->ntrials; i++) n[r->trials[i].status]++;
    snprintf(why, cap, "no candidate was timed: %d wrong, %d failed to compile, %d failed to launch, %d pruned",
             n[TRIAL_WRONG], n[TRIAL_COMPILE_ERROR], n[TRIAL_LAUNCH_ERROR], n[TRIAL_PRUNED]);
}

static void print_table(const cli *o, const xent_problem *p, const xent_device_info *info, const xent_tune_result *r) {
    char what[160], cfg[200];
    describe_problem(p, what, sizeof what);
    printf("%s %s: %d candidates, %d timed, %d failed, %.1f s\n", info->key, what, r->candidates, r->timed, r->failed,
           r->wall_s);
    /* a short budget on a cold kernel cache can end the search before any
     * variant (cache hint, block, persistence, POLY...) was tried */
    if (r->unreached)
        printf("budget: %d variants of the fastest structures left untimed (--budget %.0f s; a larger one times "
               "them)\n",
               r->unreached, o->budget);
    printf("floor (streaming read of the same %.1f MB): %.2f us = %.2f TB/s\n", r->bytes / 1e6, r->floor_us,
           r->bytes / (r->floor_us * 1e6));
    printf("%4s %9s %7s %7s %8s  %s\n", "rank", "us", "GB/s", "%floor", "vs heur", "config");
    int shown = 0;
    for (int i = 0; i < r->ntrials && shown < o->top; i++) {
        const xent_trial *t = &r->trials[i];
        if (t->status != TRIAL_OK) continue;
        config_text(&t->config, cfg, sizeof cfg);
        printf("%4d %9.2f %7.0f %6.1f%% %7.2fx  %s\n", ++shown, t->us, t->gbps, 100.0 * r->floor_us / t->us,
               r->heuristic.us / t->us, cfg);
    }
    config_text(&r->heuristic.config, cfg, sizeof cfg);
    printf("heuristic %9.2f us  %s\n", r->heuristic.us, cfg);
    config_text(&r->best.config, cfg, sizeof cfg);
    if (r->best.status == TRIAL_OK)
        printf("%s %9.2f us  %.2fx the heuristic, %.1f%% of the floor  %s%s\n", o->ngiven ? "fastest  " : "winner   ",
               r->best.us, r->heuristic.us / r->best.us, 100.0 * r->floor_us / r->best.us, cfg,
               o->ngiven && !o->store_given ? "  (of the --config list; not stored)" : "");
    for (int i = 0, n = 0; i < r->ntrials && n < 5; i++)
        if (r->trials[i].status == TRIAL_WRONG || r->trials[i].status == TRIAL_COMPILE_ERROR) {
            config_text(&r->trials[i].config, cfg, sizeof cfg);
            printf("skipped: %s: %s\n", cfg, r->trials[i].reason);
            n++;
        }
}

static void json_trial(json *j, const char *key, const xent_trial *t) {
    char cfg[200];
    config_text(&t->config, cfg, sizeof cfg);
    json_object(j, key);
    json_string(j, "config", cfg);
    json_number(j, "us", t->us);
    json_number(j, "gbps", t->gbps);
    json_end(j);
}

/* One tuned problem: the measurements a table shows (unmeasured ones null). */
static void print_json(json *j, const cli *o, const xent_problem *p, const xent_device_info *info,
                       const xent_tune_result *r) {
    json_object(j, NULL);
    json_string(j, "gpu", info->key);
    json_string(j, "device", info->name);
    json_problem(j, "problem", p);
    json_number(j, "bytes", r->bytes);
    json_number(j, "floor_us", r->floor_us);
    json_number(j, "wall_s", r->wall_s);
    json_int(j, "candidates", r->candidates);
    json_int(j, "timed", r->timed);
    json_int(j, "failed", r->failed);
    json_int(j, "unreached", r->unreached);
    json_bool(j, "given", o->ngiven > 0);
    json_trial(j, "heuristic", &r->heuristic);
    if (r->best.status == TRIAL_OK)
        json_trial(j, "best", &r->best);
    else
        json_string(j, "best", NULL);
    json_array(j, "top");
    for (int i = 0, n = 0; i < r->ntrials && n < o->top; i++)
        if (r->trials[i].status == TRIAL_OK) {
            json_trial(j, NULL, &r->trials[i]);
            n++;
        }
    json_end(j);
    json_end(j);
}

static int open_context(const cli *o, xent_context **ctx, xent_device_info *info) {
    int rc = xent_context_create(ctx, o->device);
    if (!rc) rc = xent_device_get_info(*ctx, info);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", PROG, xent_errstr(rc), xent_errmsg(*ctx));
        xent_context_destroy(*ctx);
        *ctx = NULL;
        return rc == XENT_ENODRIVER || rc == XENT_ENODEVICE ? EXIT_DEVICE : 1;
    }
    return check_gpu(o, info);
}

static int tune_one(const cli *o, xent_context *ctx, const xent_device_info *info, tc_db *db, json *j, int i) {
    xent_problem p;
    xent_tune_opts opts;
    xent_tune_result r;
    char settings[200], what[160];
    bar b = {isatty(2), o->quiet, 0};
    problem_for(o, i, &p);
    describe_problem(&p, what, sizeof what);
    xent_tune_opts_init(&opts);
    opts.budget_s = o->budget;
    opts.exhaustive = o->exhaustive;
    if (o->jobs) opts.threads = o->jobs;
    opts.progress = progress;
    opts.progress_arg = &b;
    opts.db = db;
    snprintf(settings, sizeof settings, "budget=%g exhaustive=%d reps=%d%s", o->budget, o->exhaustive, opts.reps,
             o->store_given ? " given=1" : "");
    opts.settings = settings;
    if (check_given(o, &p)) return EXIT_USAGE;
    opts.only = o->ngiven ? o->given : NULL;
    opts.nonly = o->ngiven;
    opts.store_only = o->store_given;
    if (!b.quiet) fprintf(stderr, "tuning %s on %s\n", what, info->name);
    int rc = xent_tune(ctx, &p, &opts, &r);
    if (b.tty && !b.quiet) fprintf(stderr, "\n");
    /* a winner the cache refused is still shown: the search's result is not lost with it */
    int unstored = rc == XENT_ECACHE && r.best.status == TRIAL_OK;
    if (rc && !unstored) {
        fprintf(stderr, "%s: %s: %s: %s\n", PROG, what, xent_errstr(rc), xent_errmsg(ctx));
        return rc == XENT_ECACHE ? EXIT_CACHE : 1;
    }
    if (j)
        print_json(j, o, &p, info, &r);
    else
        print_table(o, &p, info, &r);
    int ok = r.best.status == TRIAL_OK;
    char why[160];
    no_winner_reason(&r, why, sizeof why);
    xent_tune_result_free(&r);
    if (unstored) {
        fprintf(stderr, "%s: %s: %s: %s\n", PROG, what, xent_errstr(rc), xent_errmsg(ctx));
        return EXIT_CACHE;
    }
    if (!ok) fprintf(stderr, "%s: %s: %s\n", PROG, what, why);
    return ok ? 0 : 1;
}

int cmd_tune(const cli *o) {
    xent_context *ctx = NULL;
    xent_device_info info;
    tc_db *db = NULL;
    json j, *list = NULL;
    int rc = open_context(o, &ctx, &info);
    if (!rc) rc = open_db(o, 0, &db);
    if (!rc && o->json) {
        json_start(list = &j, stdout);
        json_array(list, NULL);
    }
    for (int i = 0; !rc && i < o->nshapes; i++) rc = tune_one(o, ctx, &info, db, list, i);
    if (list) json_end(list); /* a failure ends the list early, but it stays a list */
    tc_close(db);
    xent_context_destroy(ctx);
    return rc;
}
