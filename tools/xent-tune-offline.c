/*
 * xent-tune-offline.c — what xent-tune does without a GPU: the problems of a
 * command line, --dry-run (the candidates) and --compile-only (registers, spills).
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
#include "runtime/runtime.h"
#include "tools/json.h"
#include "tools/xent-tune.h"
#include "tune/tune.h"

#include "tools/xent-tune-cli.h"

void problem_for(const cli *o, int i, xent_problem *p) {
    *p = o->base;
    p->n = o->shapes[i][0];
    p->c = o->shapes[i][1];
    p->row_stride = o->row_stride ? o->row_stride : p->c;
}

/* Every problem passes the library's own check before anything computes with
 * its fields: a shape can parse and still overflow n * row_stride. */
int check_problems(const cli *o) {
    char why[256];
    for (int i = 0; i < o->nshapes; i++) {
        xent_problem p;
        problem_for(o, i, &p);
        if (xent_problem_check(&p, why, sizeof why)) {
            fprintf(stderr, "%s: shape %lldx%lld: %s\nTry '%s --help'.\n", PROG, (long long)p.n, (long long)p.c, why,
                    PROG);
            return EXIT_USAGE;
        }
    }
    return 0;
}

void describe_problem(const xent_problem *p, char *buf, size_t len) {
    static const char *ops[] = {"", " fused", " backward", " combine", " rescale"};
    char stride[40] = "";
    if (p->row_stride != p->c) snprintf(stride, sizeof stride, " stride %lld", (long long)p->row_stride);
    snprintf(buf, len, "%lldx%lld %s %s %s%s%s%s%s%s%s%s", (long long)p->n, (long long)p->c, dtype_name(p->logits),
             p->targets == XENT_I64 ? "i64" : "i32", red_name(p->reduction), p->has_weights ? " weights" : "",
             p->label_smoothing > 0 ? " smoothing" : "", p->write_lse ? " lse" : "", stride, ops[p->op],
             p->z_loss > 0 ? " z-loss" : "", p->softcap > 0 ? " softcap" : "");
}

static const xent_gpu_spec *offline_gpu(const cli *o) { return named_gpu(o) ? xent_gpu_find(o->gpu) : NULL; }

/* The SM count and architecture without a GPU: --gpu's, else an H200's
 * (--arch, when given, names the architecture). */
static int offline_sm_count(const cli *o) {
    const xent_gpu_spec *g = offline_gpu(o);
    return g ? g->sms[0] : 132;
}

static int offline_arch(const cli *o) {
    const xent_gpu_spec *g = offline_gpu(o);
    return o->arch ? o->arch : g ? g->cc : 90;
}

/* A --gpu key the library does not know is taken (a cache may be made for any
 * key), but a mistyped one would answer for an H200 without a word: say so. */
static void note_unknown_gpu(const cli *o) {
    char known[256] = "";
    if (!named_gpu(o) || offline_gpu(o)) return;
    for (const xent_gpu_spec *g = xent_known_gpus; g->key; g++) {
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", used ? " " : "", g->key);
    }
    fprintf(stderr, "%s: note: --gpu '%s' is none of the GPUs xent knows (%s): sm_%d and %d SMs assumed%s\n", PROG,
            o->gpu, known, offline_arch(o), offline_sm_count(o), o->arch ? "" : "; --arch names another architecture");
}

/* 0 when every --config can run p, else EXIT_USAGE with the reason on stderr. */
int check_given(const cli *o, const xent_problem *p) {
    char why[256], cfg[200], what[160];
    for (int k = 0; k < o->ngiven; k++)
        if (!xent_config_fits(&o->given[k], p, why, sizeof why) ||
            !xent_config_arch_fits(&o->given[k], p, offline_arch(o), why, sizeof why)) {
            xent_config_format(&o->given[k], cfg, sizeof cfg);
            describe_problem(p, what, sizeof what);
            fprintf(stderr, "%s: --config '%s' cannot run %s: %s\nTry '%s --help'.\n", PROG, cfg, what, why, PROG);
            return EXIT_USAGE;
        }
    return 0;
}

/* The configs to list or compile for p (malloc'd): the --config ones, else
 * the space's. Returns the count, or -1 (out of memory) or -EXIT_USAGE. */
static int candidates(const cli *o, const xent_problem *p, xent_config **out) {
    if (o->ngiven) {
        if (check_given(o, p)) return -EXIT_USAGE;
        *out = calloc((size_t)o->ngiven, sizeof **out);
        if (!*out) return -1;
        memcpy(*out, o->given, (size_t)o->ngiven * sizeof **out);
        return o->ngiven;
    }
    int sms = offline_sm_count(o);
    size_t n = xent_space_enumerate(p->logits, p, sms, NULL, 0);
    *out = calloc(n + 1, sizeof **out);
    if (!*out) return -1;
    xent_space_enumerate(p->logits, p, sms, *out, n);
    return (int)xent_space_for_arch(*out, n, p, offline_arch(o));
}

/* The heuristic's config for p, offline (the SM count and architecture of --gpu, else an H200's). */
static void heuristic_text(const cli *o, const xent_problem *p, char *buf, size_t len) {
    xent_config h;
    xent_config_heuristic(p, offline_sm_count(o), &h);
    xent_config_for_arch(&h, p, offline_arch(o));
    xent_config_format(&h, buf, len);
}

/* What the runtime on --gpu KEY would run for p, from the caches it reads
 * ($XENT_TUNECACHE, $XENT_DATADIR). */
typedef struct offline_answer {
    char config[200];
    xent_source source;
    tc_answer a;
} offline_answer;

static void lookup_offline(const cli *o, const xent_problem *p, offline_answer *ans) {
    xent_config cfg;
    ans->source = xent_lookup_offline(o->gpu, offline_arch(o), offline_sm_count(o), p, &cfg, &ans->a);
    xent_config_format(&cfg, ans->config, sizeof ans->config);
}

/* "CONFIG source=nearest cache=h200 note=...", as xent_plan_describe words it. */
static void print_lookup(const cli *o, const offline_answer *ans) {
    const tc_answer *a = &ans->a;
    printf("# lookup on %s: %s source=%s%s%s%s%s\n", o->gpu, ans->config, xent_source_text(ans->source),
           a->cache[0] ? " cache=" : "", a->cache, a->note[0] ? " note=" : "", a->note);
}

static void json_lookup(json *j, const offline_answer *ans) {
    json_object(j, "lookup");
    json_string(j, "config", ans->config);
    json_string(j, "source", xent_source_text(ans->source));
    json_string(j, "cache", ans->a.cache[0] ? ans->a.cache : NULL);
    json_string(j, "note", ans->a.note);
    json_end(j);
}

int cmd_dry_run(const cli *o) {
    json j;
    note_unknown_gpu(o);
    if (o->json) {
        json_start(&j, stdout);
        json_array(&j, NULL);
    }
    int rc = 0;
    for (int i = 0; !rc && i < o->nshapes; i++) {
        xent_problem p;
        char what[160], cfg[200];
        offline_answer looked;
        xent_config *cfgs;
        problem_for(o, i, &p);
        describe_problem(&p, what, sizeof what);
        int n = candidates(o, &p, &cfgs);
        if (n < 0) {
            rc = n == -EXIT_USAGE ? EXIT_USAGE : 1;
            break;
        }
        if (o->json) {
            json_object(&j, NULL);
            json_problem(&j, "problem", &p);
            json_int(&j, "arch", offline_arch(o));
            json_int(&j, "sm_count", offline_sm_count(o));
            json_array(&j, "candidates");
        } else {
            printf("# %s: %d candidates (sm_%d, %d SMs)\n", what, n, offline_arch(o), offline_sm_count(o));
        }
        for (int k = 0; k < n; k++) {
            xent_config_format(&cfgs[k], cfg, sizeof cfg);
            if (o->json)
                json_string(&j, NULL, cfg);
            else
                printf("%s\n", cfg);
        }
        heuristic_text(o, &p, cfg, sizeof cfg);
        int offline = named_gpu(o) != NULL; /* a named GPU: what its runtime would run */
        if (offline) lookup_offline(o, &p, &looked);
        if (o->json) {
            json_end(&j);
            json_string(&j, "heuristic", cfg);
            if (offline) json_lookup(&j, &looked);
            json_end(&j);
        } else {
            printf("# heuristic: %s\n", cfg);
            if (offline) print_lookup(o, &looked);
        }
        free(cfgs);
    }
    if (o->json) json_end(&j);
    return rc;
}

/* Progress on stderr: a bar on a terminal, else a line every 25 candidates
 * (every chunk, when compiling) and at the end. best_us <= 0: nothing timed yet. */
void progress(void *arg, int done, int total, double best_us, const char *stage) {
    bar *b = arg;
    char best[40] = "";
    if (b->quiet) return;
    if (best_us > 0) snprintf(best, sizeof best, b->tty ? " best %8.2f us" : ", best %.2f us", best_us);
    if (b->tty) {
        int width = 30, fill = total ? done * width / total : 0;
        fprintf(stderr, "\r  %-10s [%.*s%*s] %4d/%-4d%s", stage, fill, "##############################", width - fill,
                "", done, total, best);
        fflush(stderr);
    } else if (done - b->last >= 25 || done == total) {
        fprintf(stderr, "  %s: %d/%d candidates%s\n", stage, done, total, best);
        b->last = done;
    }
}

/* Compile n candidates in chunks, so that progress shows between them; a
 * chunk is several per thread, so threads seldom wait on the last of one.
 * Only each kernel's counters are kept: a space's CUBINs would not fit. */
static void compile_all(const cli *o, const xent_problem *p, const xent_config *cfgs, int n, int *status,
                        xent_cubin *bins, char (*errs)[512]) {
    xent_tune_opts defaults;
    xent_tune_opts_init(&defaults); /* --jobs defaults to the CPUs, as for a tune */
    int threads = o->jobs ? o->jobs : defaults.threads, chunk = threads * 16;
    bar b = {isatty(2), o->quiet, 0};
    for (int at = 0; at < n; at += chunk) {
        int m = n - at < chunk ? n - at : chunk;
        xent_compile_many(cfgs + at, m, p, 1, offline_arch(o), threads, status + at, bins + at, errs + at);
        for (int k = at; k < at + m; k++) xent_cubin_free(&bins[k]);
        progress(&b, at + m, n, 0, "compile");
    }
    if (b.tty && !b.quiet) fputc('\n', stderr);
}

static void compile_report(json *j, const xent_config *c, int status, const xent_cubin *bin, const char *err) {
    char cfg[200];
    xent_config_format(c, cfg, sizeof cfg);
    if (!j) {
        if (status)
            printf("FAILED %s: %s\n", cfg, err);
        else
            printf("%5d %6d %6d %6d  %s\n", bin->registers, bin->spill_bytes, bin->stack_bytes, bin->smem_bytes, cfg);
        return;
    }
    json_object(j, NULL);
    json_string(j, "config", cfg);
    if (status) {
        json_string(j, "error", err);
    } else {
        json_int(j, "registers", bin->registers);
        json_int(j, "spill_bytes", bin->spill_bytes);
        json_int(j, "stack_bytes", bin->stack_bytes);
        json_int(j, "smem_bytes", bin->smem_bytes);
    }
    json_end(j);
}

/* One problem's candidates compiled and reported; the failures are counted into *failed. */
static int compile_problem(const cli *o, json *j, int i, int *failed) {
    xent_problem p;
    char what[160];
    xent_config *cfgs;
    problem_for(o, i, &p);
    describe_problem(&p, what, sizeof what);
    int n = candidates(o, &p, &cfgs);
    if (n < 0) return n == -EXIT_USAGE ? EXIT_USAGE : 1;
    int *status = calloc((size_t)n + 1, sizeof *status);
    xent_cubin *bins = calloc((size_t)n + 1, sizeof *bins);
    char(*errs)[512] = calloc((size_t)n + 1, sizeof *errs);
    int rc = status && bins && errs ? 0 : 1;
    if (!rc) {
        if (!o->quiet) fprintf(stderr, "compiling %d candidates of %s for sm_%d\n", n, what, offline_arch(o));
        compile_all(o, &p, cfgs, n, status, bins, errs);
        if (j) {
            json_object(j, NULL);
            json_problem(j, "problem", &p);
            json_int(j, "arch", offline_arch(o));
            json_array(j, "results");
        } else {
            printf("# %s: %d candidates compiled for sm_%d\n%5s %6s %6s %6s  %s\n", what, n, offline_arch(o), "regs",
                   "spill", "stack", "smem", "config");
        }
        for (int k = 0; k < n; k++) {
            *failed += status[k] != 0;
            compile_report(j, &cfgs[k], status[k], &bins[k], errs[k]);
        }
        if (j) {
            json_end(j);
            json_end(j);
        }
    }
    free(status);
    free(bins);
    free(errs);
    free(cfgs);
    return rc;
}

int cmd_compile_only(const cli *o) {
    json j;
    int failed = 0, rc = 0;
    note_unknown_gpu(o);
    if (o->json) {
        json_start(&j, stdout);
        json_array(&j, NULL);
    }
    for (int i = 0; !rc && i < o->nshapes; i++) rc = compile_problem(o, o->json ? &j : NULL, i, &failed);
    if (o->json) json_end(&j);
    if (failed) fprintf(stderr, "%s: %d candidates failed to compile\n", PROG, failed);
    return rc ? rc : failed ? 1 : 0;
}
