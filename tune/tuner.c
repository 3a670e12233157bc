/* tune/tuner.c — the staged search: compile in parallel, check, time, store. */
#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen/gen.h"
#include "tune/bufs.h"
#include "tune/parallel.h"

/* A candidate slower than this multiple of the best is dropped after one repeat. */
#define PRUNE_FACTOR 1.5
/* Stage 2 widens the fastest few structures of stage 1. */
#define STAGE2_STRUCTURES 6
/* Each timed batch of back-to-back calls lasts at least this long. */
#define BATCH_US 1000.0
/* A call under this multiple of the host's time to queue it is timed behind a
 * spin of HEAD_START_MARGIN times the batch's queueing time plus HEAD_START_US. */
#define HEAD_START_BELOW 4.0
#define HEAD_START_MARGIN 2.0
#define HEAD_START_US 20.0
#define ERR_LIMIT 1e-5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void xent_tune_opts_init(xent_tune_opts *o) {
    memset(o, 0, sizeof *o);
    o->budget_s = 30.0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cpus > 0 ? (int)cpus : 1;
    o->reps = 15;
}

double xent_problem_bytes(const xent_problem *p) {
    double bytes = (double)p->n * (double)p->c * xent_dtype_size(p->logits);
    if (p->op == XENT_OP_FUSED || p->op == XENT_OP_BACKWARD) bytes *= 2; /* the gradient written */
    bytes += (double)p->n * (p->targets == XENT_I64 ? 8 : 4);
    bytes += p->reduction == XENT_REDUCE_NONE ? 4.0 * p->n : 4.0;
    if (p->write_lse) bytes += 4.0 * p->n;
    return bytes;
}

/* ---- parallel compilation ---- */

typedef struct compile_job {
    const xent_config *cfgs;
    const xent_problem *probs;
    int nprobs, arch;
    const int *order; /* the candidates to compile, by index */
    int *status;
    xent_cubin *bins;
    char (*errs)[512];
} compile_job;

static void compile_one(void *arg, int64_t k, int thread) {
    (void)thread;
    compile_job *job = arg;
    const int i = job->order[k];
    xent_cubin bin;
    char err[512];
    const xent_problem *p = &job->probs[job->nprobs == 1 ? 0 : i];
    job->status[i] = xent_kernel_get(&job->cfgs[i], p, job->arch, &bin, err, sizeof err);
    if (job->errs) snprintf(job->errs[i], sizeof job->errs[i], "%s", job->status[i] ? err : "");
    if (job->bins)
        job->bins[i] = bin;
    else
        xent_cubin_free(&bin);
}

typedef struct kernel_of {
    uint64_t id; /* xent_kernel_id: the kernel cache's key */
    int index;
} kernel_of;

static int cmp_kernel_of(const void *a, const void *b) {
    const kernel_of *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The candidates in an order that puts the first of each kernel before all the others (candidates
 * that differ only in launch knobs, PERSIST or a SPLIT > 1, share one); returns how many are
 * first, or -1 without memory. Ids that collide only make a kernel wait for the second pass. */
static int firsts_first(const xent_config *cfgs, int n, const xent_problem *probs, int nprobs, int arch,
                        int *order) {
    kernel_of *k = malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k) return -1;
    for (int i = 0; i < n; i++) {
        k[i].id = xent_kernel_id(&cfgs[i], &probs[nprobs == 1 ? 0 : i], arch);
        k[i].index = i;
    }
    qsort(k, (size_t)n, sizeof *k, cmp_kernel_of);
    int firsts = 0, rest = n;
    for (int j = 0; j < n; j++) {
        if (j == 0 || k[j].id != k[j - 1].id) order[firsts++] = k[j].index;
        else order[--rest] = k[j].index;
    }
    free(k);
    return firsts;
}

/* Each kernel is compiled once: its first candidate on the threads, then the others, which find it
 * in the kernel cache. Compiled in one pass, threads would take a kernel's candidates side by side
 * and each compile it (two threads compiled a space in the time one did, at twice the CPU time). */
void xent_compile_many(const xent_config *cfgs, int n, const xent_problem *probs, int nprobs, int arch, int threads,
                       int *status, xent_cubin *bins, char (*errs)[512]) {
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) {
        for (int i = 0; i < n; i++) {
            status[i] = XENT_ENOMEM;
            if (errs) snprintf(errs[i], sizeof errs[i], "out of memory");
            if (bins) memset(&bins[i], 0, sizeof bins[i]);
        }
        return;
    }
    int firsts = firsts_first(cfgs, n, probs, nprobs, arch, order);
    if (firsts < 0) { /* no memory to sort them: one pass as given */
        for (int i = 0; i < n; i++) order[i] = i;
        firsts = n;
    }
    compile_job job = {cfgs, probs, nprobs, arch, order, status, bins, errs};
    tune_parallel(firsts, threads, compile_one, &job);
    job.order = order + firsts;
    tune_parallel(n - firsts, threads, compile_one, &job);
    free(order);
}

/* ---- timing ---- */

typedef struct timer {
    xent_context *ctx;
    CUevent start, stop;
    const tune_bufs *bufs;
    int reps;
    CUmodule floor_mod[2]; /* templates/read_floor.cu at XENT_UNROLL 4 and 8, loaded on first use */
    CUfunction spin;       /* its xent_spin: the head start */
    int head_start;        /* this candidate's batches start behind a spin */
    double host_us;        /* the host's time to queue a launch, from the last batch */
} timer;

typedef int (*launch_fn)(void *arg, int copy);

/* Queues `count` back-to-back launches over rotating copies between the
 * timer's events; *late is set when the start event had passed before the
 * last launch was queued (the GPU may have waited on the host). */
static int queue_batch(timer *t, launch_fn fn, void *arg, int count, int *late) {
    const xent_driver *d = t->ctx->drv;
    CUresult r = CUDA_SUCCESS;
    if (t->head_start) {
        long long ns = (long long)(1000.0 * (HEAD_START_MARGIN * t->host_us * count + HEAD_START_US));
        void *args[] = {&ns};
        r = d->LaunchKernel(t->spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
    }
    if (r == CUDA_SUCCESS) r = d->EventRecord(t->start, NULL);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(t->ctx, "timing", r);
    double h0 = now_s();
    int rc = XENT_OK;
    for (int i = 0; i < count && !rc; i++) rc = fn(arg, i % t->bufs->ncopies);
    if (rc) return rc;
    t->host_us = (now_s() - h0) * 1e6 / count;
    *late = t->head_start && d->EventQuery(t->start) == CUDA_SUCCESS;
    return XENT_OK;
}

/* One batch, in µs per call; a batch whose head start ran out before the host
 * had queued it is queued again (the host's rate is then known). */
static int time_batch(timer *t, launch_fn fn, void *arg, int count, double *us) {
    const xent_driver *d = t->ctx->drv;
    int late = 1, rc = XENT_OK;
    float ms = 0;
    for (int tries = 0; late && tries < 3 && !rc; tries++) {
        rc = queue_batch(t, fn, arg, count, &late);
        CUresult r = rc ? CUDA_SUCCESS : d->EventRecord(t->stop, NULL);
        if (r == CUDA_SUCCESS && !rc) r = d->EventSynchronize(t->stop);
        if (r == CUDA_SUCCESS && !rc) r = d->EventElapsedTime(&ms, t->start, t->stop);
        if (r != CUDA_SUCCESS) rc = xent_fail_cuda(t->ctx, "timing", r);
    }
    if (!rc) *us = ms * 1000.0 / count;
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of t->reps batches; gives up after one when slower than `prune_us`. */
static int time_median(timer *t, launch_fn fn, void *arg, double prune_us, double *us, int *pruned) {
    double est;
    int rc;
    *pruned = 0;
    t->head_start = 0;
    if ((rc = time_batch(t, fn, arg, 2, &est))) return rc; /* warm-up and estimate */
    /* a call near the host's launch rate is timed behind a head start; a longer
     * one keeps the GPU ahead of the host by itself */
    t->head_start = t->spin && est < HEAD_START_BELOW * t->host_us;
    if (t->head_start && (rc = time_batch(t, fn, arg, 2, &est))) return rc;
    int count = (int)ceil(BATCH_US / (est > 1.0 ? est : 1.0));
    if (count < t->bufs->ncopies) count = t->bufs->ncopies;
    if (count > 200) count = 200;
    double samples[64];
    int reps = t->reps < 64 ? t->reps : 64;
    for (int i = 0; i < reps; i++) {
        if ((rc = time_batch(t, fn, arg, count, &samples[i]))) return rc;
        if (i == 0 && prune_us > 0 && samples[0] > prune_us) {
            *us = samples[0];
            *pruned = 1;
            return XENT_OK;
        }
    }
    qsort(samples, (size_t)reps, sizeof samples[0], cmp_double);
    *us = samples[reps / 2];
    return XENT_OK;
}

typedef struct plan_launch {
    xent_plan *plan;
    const tune_bufs *bufs;
} plan_launch;

static int launch_plan(void *arg, int copy) {
    plan_launch *pl = arg;
    xent_args a;
    tune_bufs_args(pl->bufs, copy, &a);
    return xent_plan_launch(pl->plan, NULL, &a);
}

/* templates/read_floor.cu compiled with `unroll` (4 or 8) loads in flight a
 * thread and loaded, once a tune for each: the floor's variants and the head
 * start's spin take their kernels from it. */
static int floor_module(timer *t, int unroll, CUmodule *mod) {
    xent_context *ctx = t->ctx;
    CUmodule *slot = &t->floor_mod[unroll == 8];
    if (!*slot) {
        xent_cubin bin;
        char err[1024], *src = NULL;
        if (asprintf(&src, "#define XENT_UNROLL %d\n%s", unroll, xent_template_read_floor) < 0) return XENT_ENOMEM;
        int rc = xent_nvrtc_compile(src, ctx->arch, &bin, err, sizeof err);
        free(src);
        if (rc) return xent_fail(ctx, rc, "read floor: %s", err);
        CUresult r = ctx->drv->ModuleLoadData(slot, bin.data);
        xent_cubin_free(&bin);
        if (r != CUDA_SUCCESS) {
            *slot = NULL;
            return xent_fail_cuda(ctx, "cuModuleLoadData(read floor)", r);
        }
    }
    *mod = *slot;
    return XENT_OK;
}

/* The spin of the timer's head starts; without it (a failed compile or load)
 * every batch is timed as the host queues it. */
static void timer_load_spin(timer *t) {
    CUmodule mod;
    if (floor_module(t, 4, &mod) || t->ctx->drv->ModuleGetFunction(&t->spin, mod, "xent_spin") != CUDA_SUCCESS)
        t->spin = NULL;
}

/* The one-shot read's shape (templates/read_floor.cu). */
#define ONCE_BLOCK 256
#define ONCE_VECS (ONCE_BLOCK * 8)

typedef struct floor_launch {
    xent_context *ctx;
    CUfunction fn;
    CUdeviceptr sink;
    const tune_bufs *bufs;
    unsigned grid; /* 0: the one-shot kernel, a block per ONCE_VECS vectors */
} floor_launch;

static long long once_blocks(long long vecs) { return (vecs + ONCE_VECS - 1) / ONCE_VECS; }

static int launch_floor(void *arg, int copy) {
    floor_launch *fl = arg;
    long long na = (long long)(fl->bufs->logits_bytes / 16), nb = (long long)(fl->bufs->targets_bytes / 16);
    long long ba = once_blocks(na), grid = fl->grid ? fl->grid : ba + once_blocks(nb);
    CUdeviceptr a = fl->bufs->logits[copy], b = fl->bufs->targets[copy];
    void *loop[] = {&a, &na, &b, &nb, &fl->sink}, *once[] = {&a, &na, &b, &nb, &ba, &fl->sink};
    if (grid > 0x7fffffffLL)
        return xent_fail(fl->ctx, XENT_EINVAL, "read floor: %lld blocks, more than a launch takes", grid);
    CUresult r = fl->ctx->drv->LaunchKernel(fl->fn, (unsigned)(grid > 0 ? grid : 1), 1, 1, fl->grid ? 256 : ONCE_BLOCK,
                                            1, 1, 0, NULL, fl->grid ? loop : once, NULL);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(fl->ctx, "cuLaunchKernel(read floor)", r);
}

/* One read-floor variant: the loop's loads in flight per thread and blocks
 * per SM, or (blocks_per_sm 0) the one-shot kernel. */
static int time_floor_variant(timer *t, int unroll, int blocks_per_sm, CUdeviceptr sink, double *us) {
    xent_context *ctx = t->ctx;
    CUmodule mod;
    int rc = floor_module(t, unroll, &mod);
    if (rc) return rc;
    floor_launch fl = {ctx, NULL, sink, t->bufs, (unsigned)(ctx->info.sm_count * blocks_per_sm)};
    CUresult r = ctx->drv->ModuleGetFunction(&fl.fn, mod, blocks_per_sm ? "xent_read_floor" : "xent_read_once");
    int pruned;
    return r == CUDA_SUCCESS ? time_median(t, launch_floor, &fl, 0, us, &pruned) : xent_fail_cuda(ctx, "read floor", r);
}

/* The streaming read of the same bytes, timed by the same protocol: the
 * fastest of a few shapes of a plain read, so the floor is not a straw man.
 * The last (blocks 0) is the one-shot read. */
static int time_floor(timer *t, double *us) {
    static const int shapes[][2] = {{4, 4}, {4, 8}, {4, 16}, {8, 4}, {8, 8}, {8, 16}, {8, 0}};
    CUdeviceptr sink;
    CUresult r = t->ctx->drv->MemAlloc(&sink, 16);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(t->ctx, "read floor", r);
    int rc = XENT_OK;
    *us = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && !rc; i++) {
        double v;
        rc = time_floor_variant(t, shapes[i][0], shapes[i][1], sink, &v);
        if (!rc && (*us == 0 || v < *us)) *us = v;
    }
    t->ctx->drv->MemFree(sink);
    return rc;
}

typedef struct copy_launch {
    xent_context *ctx;
    const tune_bufs *bufs;
} copy_launch;

static int launch_copy(void *arg, int copy) {
    copy_launch *cl = arg;
    CUresult r = cl->ctx->drv->MemcpyDtoDAsync(cl->bufs->grad, cl->bufs->logits[copy], cl->bufs->logits_bytes, NULL);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(cl->ctx, "cuMemcpyDtoDAsync(copy floor)", r);
}

/* A gradient's floor: a device copy of the logits' bytes into the gradient
 * (read once, write once), timed by the same protocol. */
static int time_copy_floor(timer *t, double *us) {
    copy_launch cl = {t->ctx, t->bufs};
    int pruned;
    return time_median(t, launch_copy, &cl, 0, us, &pruned);
}

/* ---- one candidate ---- */

/* Run once on poisoned outputs; *err gets the loss's error and *gerr the
 * gradient's (0 for the forward family). */
static int check_result(xent_context *ctx, xent_plan *plan, tune_bufs *b, double *err, double *gerr) {
    const xent_driver *d = ctx->drv;
    size_t bytes = b->out_count * sizeof(float);
    CUresult r = bytes ? d->MemsetD8(b->loss, 0xff, bytes) : CUDA_SUCCESS; /* poison: NaN unless written */
    if (r == CUDA_SUCCESS && b->grad) r = d->MemsetD8(b->grad, 0xff, b->logits_bytes);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "poisoning the output", r);
    plan_launch pl = {plan, b};
    int rc = launch_plan(&pl, 0);
    if (rc) return rc;
    if (bytes) r = d->MemcpyDtoH(b->host_out, b->loss, bytes);
    if (r == CUDA_SUCCESS && b->grad) r = tune_bufs_read_grad(d, b);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "reading the result", r);
    *err = tune_bufs_error(b);
    *gerr = tune_bufs_grad_error(b);
    return XENT_OK;
}

/* An earlier trial of the same kernel and grid: static PERSIST values
 * often launch alike (every one where the rows fit one round). */
static const xent_trial *same_launch(const xent_trial *done, int ndone, const xent_trial *trial) {
    for (int i = 0; i < ndone; i++)
        if (done[i].grid == trial->grid && xent_config_same_kernel(&done[i].config, &trial->config) &&
            (done[i].status == TRIAL_OK || done[i].status == TRIAL_PRUNED || done[i].status == TRIAL_WRONG))
            return &done[i];
    return NULL;
}

/* Builds, checks and times trial's config; one that launches as an earlier
 * trial of done did takes that trial's outcome instead of being timed again. */
static void evaluate(timer *t, const xent_problem *p, xent_trial *trial, double best_us, const xent_trial *done,
                     int ndone) {
    xent_context *ctx = t->ctx;
    xent_plan *plan = NULL;
    trial->status = TRIAL_LAUNCH_ERROR;
    if (xent_plan_build(ctx, p, &trial->config, XENT_SOURCE_EXPLICIT, &plan)) {
        trial->status = TRIAL_COMPILE_ERROR;
        snprintf(trial->reason, sizeof trial->reason, "%.150s", xent_errmsg(ctx));
        return;
    }
    trial->registers = plan->registers;
    trial->grid = plan->grid;
    const xent_trial *twin = same_launch(done, ndone, trial);
    if (twin) {
        trial->status = twin->status;
        trial->us = twin->us;
        trial->gbps = twin->gbps;
        trial->rel_err = twin->rel_err;
        if (twin->status == TRIAL_WRONG)
            snprintf(trial->reason, sizeof trial->reason, "%s", twin->reason);
        else
            snprintf(trial->reason, sizeof trial->reason, "the launch of PERSIST=%d (%u blocks), not timed again",
                     twin->config.persist, twin->grid);
        xent_plan_destroy(plan);
        return;
    }
    tune_bufs *b = (tune_bufs *)t->bufs;
    int pruned = 0;
    double gerr = 0, gtol = tune_grad_tolerance(p->logits, p->op);
    if (check_result(ctx, plan, b, &trial->rel_err, &gerr)) {
        snprintf(trial->reason, sizeof trial->reason, "%.150s", xent_errmsg(ctx));
    } else if (!(trial->rel_err <= ERR_LIMIT)) {
        trial->status = TRIAL_WRONG;
        snprintf(trial->reason, sizeof trial->reason, "relative error %.3g > %g", trial->rel_err, ERR_LIMIT);
    } else if (!(gerr <= gtol)) {
        trial->status = TRIAL_WRONG;
        snprintf(trial->reason, sizeof trial->reason, "gradient error %.3g > %g", gerr, gtol);
    } else {
        plan_launch pl = {plan, b};
        double prune = best_us > 0 ? best_us * PRUNE_FACTOR : 0;
        if (time_median(t, launch_plan, &pl, prune, &trial->us, &pruned))
            snprintf(trial->reason, sizeof trial->reason, "%.150s", xent_errmsg(ctx));
        else
            trial->status = pruned ? TRIAL_PRUNED : TRIAL_OK;
        if (pruned) snprintf(trial->reason, sizeof trial->reason, "over %.1fx the best after one repeat", PRUNE_FACTOR);
    }
    trial->gbps = trial->us > 0 ? xent_problem_bytes(p) / (trial->us * 1e3) : 0;
    xent_plan_destroy(plan);
}

/* ---- the search ---- */

typedef struct search {
    xent_context *ctx;
    const xent_problem *p;
    const xent_tune_opts *o;
    timer t;
    xent_trial *trials;
    int ntrials, cap;
    double best_us, t0;
    int total, unreached;
} search;

static const char *status_name(trial_status s) {
    static const char *names[] = {"ok", "compile-error", "wrong", "launch-error", "pruned"};
    return names[s];
}

static int seen(const search *s, const xent_config *c) {
    for (int i = 0; i < s->ntrials; i++)
        if (!memcmp(&s->trials[i].config, c, sizeof *c)) return 1;
    return 0;
}

static void record_trial(search *s, const xent_trial *tr) {
    if (!s->o->db) return;
    tc_key key;
    char cfg[200];
    xent_tc_key(s->ctx, s->p, &key);
    xent_config_format(&tr->config, cfg, sizeof cfg);
    tc_add_trial(s->o->db, &key, cfg, tr->us, tr->gbps, status_name(tr->status));
}

/* Configs a bounded batch compiles at a time, per compile thread. */
#define SLICE_PER_THREAD 2

static int over_budget(const search *s) { return now_s() - s->t0 > s->o->budget_s && s->best_us > 0; }

/* Check and time cfgs[0, n) of a batch, compiled: how many it took before
 * the budget (when bounded) or the trial table ran out. */
static int time_slice(search *s, const xent_config *cfgs, int n, const int *status, char (*errs)[512],
                      const char *stage, int bounded) {
    for (int i = 0; i < n; i++) {
        if ((bounded && over_budget(s)) || s->ntrials == s->cap) return i;
        xent_trial *tr = &s->trials[s->ntrials++];
        memset(tr, 0, sizeof *tr);
        tr->config = cfgs[i];
        if (status[i]) {
            tr->status = TRIAL_COMPILE_ERROR;
            snprintf(tr->reason, sizeof tr->reason, "%.150s", errs[i]);
        } else {
            /* a --config list asks for each config's time: none is cut short against another */
            evaluate(&s->t, s->p, tr, s->o->only ? 0 : s->best_us, s->trials, s->ntrials - 1);
        }
        if (tr->status == TRIAL_OK && (s->best_us <= 0 || tr->us < s->best_us)) s->best_us = tr->us;
        record_trial(s, tr);
        if (s->o->progress) s->o->progress(s->o->progress_arg, s->ntrials, s->total, s->best_us, stage);
    }
    return n;
}

/* Compile in parallel, then check and time each in turn. A bounded batch
 * goes in slices of a few configs a compile thread, so that a budget spent
 * compiling is spent on configs it then times: a whole batch of variants
 * compiled first, on a cold kernel cache, can outlast the budget and leave
 * every variant untimed. It stops at the budget. The structure stage is unbounded
 * and always finishes (a tune that times nothing would store the heuristic
 * as its winner), and an exhaustive search ignores the budget by definition. */
static int run_batch(search *s, const xent_config *cfgs, int n, const char *stage, int bounded) {
    int *status = calloc((size_t)n + 1, sizeof *status);
    char(*errs)[512] = calloc((size_t)n + 1, sizeof *errs);
    if (!status || !errs) {
        free(status);
        free(errs);
        return XENT_ENOMEM;
    }
    const int slice = bounded ? SLICE_PER_THREAD * (s->o->threads > 1 ? s->o->threads : 1) : (n > 0 ? n : 1);
    int done = 0;
    while (done < n && !(bounded && over_budget(s))) {
        const int m = n - done < slice ? n - done : slice;
        xent_compile_many(cfgs + done, m, s->p, 1, s->ctx->arch, s->o->threads, status + done, NULL, errs + done);
        const int took = time_slice(s, cfgs + done, m, status + done, errs + done, stage, bounded);
        done += took;
        if (took < m) break;
    }
    if (bounded && s->ntrials < s->cap) s->unreached += n - done;
    free(status);
    free(errs);
    return XENT_OK;
}

static int cmp_trial(const void *a, const void *b) {
    const xent_trial *x = a, *y = b;
    int xo = x->status == TRIAL_OK, yo = y->status == TRIAL_OK;
    if (xo != yo) return yo - xo;
    return (x->us > y->us) - (x->us < y->us);
}

/* A structure: how a row is cut into teams, chunks and passes. The cache
 * hint, the block, the grid, POLY (which pipe computes the exponentials)
 * and EVICT are its variants, timed only for the fastest structures. */
static int same_structure(const xent_config *a, const xent_config *b) {
    return a->vec == b->vec && a->tpr == b->tpr && a->items == b->items && a->passes == b->passes &&
           a->split == b->split && a->prefetch == b->prefetch && a->stash == b->stash && a->flat == b->flat;
}

/* Stage 1's variant of a structure: the default cache hint, block and
 * persistence; in the training family EVICT as the heuristic sets it (rows
 * read twice), so that a short budget times the likelier winner. */
static int is_stage1(const xent_config *c, const xent_problem *p) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD)
        return c->cache == 0 && c->evict == xent_config_reads_twice(c, p) && (c->tpr > 32 || c->block == 128);
    return c->cache == 0 && c->persist == 1 && c->poly == 0 && (c->tpr > 32 || c->block == 128);
}

/* Stage 1: the structural knobs at default block, cache and persistence.
 * Stage 2: every variant of the fastest few structures, the fastest
 * structure's first, so that a budget that ends the stage early has timed
 * the likelier winners. */
static int staged(search *s, xent_config *all, int nall, xent_config *pick) {
    int n = 0;
    for (int i = 0; i < nall; i++)
        if (is_stage1(&all[i], s->p) && !seen(s, &all[i])) pick[n++] = all[i];
    int rc = run_batch(s, pick, n, "structure", 0);
    if (rc) return rc;
    qsort(s->trials, (size_t)s->ntrials, sizeof *s->trials, cmp_trial);
    int top = s->ntrials < STAGE2_STRUCTURES ? s->ntrials : STAGE2_STRUCTURES;
    n = 0;
    for (int k = 0; k < top; k++) {
        /* the lookup's plan may share a structure with a stage-1 config: widen it once */
        int skip = s->trials[k].status != TRIAL_OK;
        for (int j = 0; j < k && !skip; j++) skip = same_structure(&s->trials[j].config, &s->trials[k].config);
        if (skip) continue;
        for (int i = 0; i < nall; i++)
            if (same_structure(&all[i], &s->trials[k].config) && !seen(s, &all[i])) pick[n++] = all[i];
    }
    return run_batch(s, pick, n, "variants", 1);
}

/* A winner the cache did not take (a full disk, a read-only file) fails the
 * tune: the caller was told nothing was stored while the search's result
 * was thrown away. The result stays filled for the caller to show. Trial
 * rows are a record of the search and their failures are left out: the
 * winner's write after them says whether the cache takes writes. */
static int store_winner(search *s, const xent_tune_result *r) {
    /* configs the caller named are a measurement, not a search: a winner
     * among them may be far from the best, so it replaces one only when the
     * caller says they are a search's (store_only) */
    if (!s->o->db || r->best.status != TRIAL_OK || (s->o->only && !s->o->store_only)) return XENT_OK;
    tc_key key;
    tc_entry e;
    memset(&e, 0, sizeof e);
    xent_tc_key(s->ctx, s->p, &key);
    xent_config_format(&r->best.config, e.config, sizeof e.config);
    e.us = r->best.us;
    e.gbps = r->best.gbps;
    e.when = (int64_t)time(NULL);
    /* untimed: the variants the budget left, so that a cache says which of its winners a larger
     * budget could still change */
    snprintf(e.settings, sizeof e.settings, "%s floor_us=%.2f heuristic_us=%.2f untimed=%d",
             s->o->settings ? s->o->settings : "", r->floor_us, r->heuristic.us, r->unreached);
    int rc = tc_put(s->o->db, &key, &e);
    return rc == XENT_OK ? rc : xent_fail(s->ctx, XENT_ECACHE, "the winner was not stored: %s", tc_errmsg(s->o->db));
}

/* The caller's configs, as they are (xent_tune checked that they fit). */
static int search_given(search *s, xent_tune_result *r) {
    s->cap = s->o->nonly;
    s->trials = calloc((size_t)s->cap, sizeof *s->trials);
    if (!s->trials) return XENT_ENOMEM;
    r->candidates = s->total = s->o->nonly;
    return run_batch(s, s->o->only, s->o->nonly, "given", 0);
}

/* The config the runtime gives the problem untuned (the caches' answer,
 * fitted to it): timed first and a candidate like any, so that a tune never
 * stores a winner slower than the plan it replaces. */
static int seed_lookup(search *s) {
    xent_config cfg;
    tc_answer a;
    xent_source src = xent_lookup_offline(s->ctx->info.key, s->ctx->arch, s->ctx->info.sm_count, s->p, &cfg, &a);
    if (src == XENT_SOURCE_HEURISTIC) return XENT_OK; /* the heuristic is timed as the baseline */
    return run_batch(s, &cfg, 1, "lookup", 0);
}

static int search_all(search *s, xent_tune_result *r) {
    if (s->o->only) return search_given(s, r);
    xent_problem *p = (xent_problem *)s->p;
    size_t nall = xent_space_enumerate(p->logits, p, s->ctx->info.sm_count, NULL, 0);
    xent_config *all = calloc(nall + 1, sizeof *all), *pick = calloc(nall + 1, sizeof *pick);
    s->cap = (int)nall + 1;
    s->trials = calloc((size_t)s->cap, sizeof *s->trials);
    if (!all || !pick || !s->trials) {
        free(all);
        free(pick);
        return XENT_ENOMEM;
    }
    xent_space_enumerate(p->logits, p, s->ctx->info.sm_count, all, nall);
    nall = xent_space_for_arch(all, nall, p, s->ctx->arch);
    r->candidates = (int)nall;
    s->total = (int)nall;
    int rc = seed_lookup(s);
    if (!rc) rc = s->o->exhaustive ? run_batch(s, all, (int)nall, "exhaustive", 0) : staged(s, all, (int)nall, pick);
    free(all);
    free(pick);
    return rc;
}

static void summarize(search *s, xent_tune_result *r) {
    r->unreached = s->unreached;
    qsort(s->trials, (size_t)s->ntrials, sizeof *s->trials, cmp_trial);
    r->trials = s->trials;
    r->ntrials = s->ntrials;
    for (int i = 0; i < s->ntrials; i++) {
        if (s->trials[i].status == TRIAL_OK) r->timed++;
        if (s->trials[i].status == TRIAL_WRONG || s->trials[i].status == TRIAL_COMPILE_ERROR ||
            s->trials[i].status == TRIAL_LAUNCH_ERROR)
            r->failed++;
    }
    if (s->ntrials && s->trials[0].status == TRIAL_OK) r->best = s->trials[0];
    if (!s->o->only && r->heuristic.status == TRIAL_OK && (r->best.status != TRIAL_OK || r->heuristic.us < r->best.us))
        r->best = r->heuristic; /* the default stays when nothing beats it */
}

int xent_tune(xent_context *ctx, const xent_problem *p_in, const xent_tune_opts *o, xent_tune_result *r) {
    char why[256];
    memset(r, 0, sizeof *r);
    r->best.status = TRIAL_LAUNCH_ERROR;
    if (!ctx || !p_in || !o) return xent_fail(ctx, XENT_EINVAL, "xent_tune: NULL argument");
    if (xent_problem_check(p_in, why, sizeof why)) return xent_fail(ctx, XENT_EINVAL, "problem: %s", why);
    xent_problem p;
    xent_problem_normalize(p_in, &p);
    for (int k = 0; o->only && k < o->nonly; k++)
        if (!xent_config_fits(&o->only[k], &p, why, sizeof why))
            return xent_fail(ctx, XENT_EINVAL, "xent_tune: config %d of %d: %s", k + 1, o->nonly, why);
    if (o->only && o->nonly < 1) return xent_fail(ctx, XENT_EINVAL, "xent_tune: an empty config list");
    search s = {.ctx = ctx, .p = &p, .o = o, .t0 = now_s()};
    tune_bufs bufs;
    int pushed, rc = xent_ctx_enter(ctx, &pushed);
    if (rc) return rc;
    rc = tune_bufs_create(ctx, &p, 0x5eed1234abcdull ^ (uint64_t)p.n * 31 ^ (uint64_t)p.c, &bufs);
    s.t = (timer){.ctx = ctx, .bufs = &bufs, .reps = o->reps > 0 ? o->reps : 15};
    CUresult cr = CUDA_SUCCESS;
    if (!rc && ((cr = ctx->drv->EventCreate(&s.t.start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
                (cr = ctx->drv->EventCreate(&s.t.stop, CU_EVENT_DEFAULT)) != CUDA_SUCCESS))
        rc = xent_fail_cuda(ctx, "cuEventCreate", cr);
    r->bytes = xent_problem_bytes(&p);
    if (!rc) timer_load_spin(&s.t);
    if (!rc) rc = bufs.grad ? time_copy_floor(&s.t, &r->floor_us) : time_floor(&s.t, &r->floor_us);
    if (!rc) {
        xent_config_heuristic(&p, ctx->info.sm_count, &r->heuristic.config);
        xent_config_for_arch(&r->heuristic.config, &p, ctx->arch);
        evaluate(&s.t, &p, &r->heuristic, 0, NULL, 0);
        if (r->heuristic.status == TRIAL_OK) s.best_us = r->heuristic.us;
        rc = search_all(&s, r);
    }
    if (!rc) {
        summarize(&s, r);
        rc = store_winner(&s, r);
    } else {
        free(s.trials);
    }
    if (s.t.start) ctx->drv->EventDestroy(s.t.start);
    if (s.t.stop) ctx->drv->EventDestroy(s.t.stop);
    for (int k = 0; k < 2; k++)
        if (s.t.floor_mod[k]) ctx->drv->ModuleUnload(s.t.floor_mod[k]);
    tune_bufs_destroy(ctx, &bufs);
    xent_ctx_leave(ctx, pushed);
    r->wall_s = now_s() - s.t0;
    return rc;
}

void xent_tune_result_free(xent_tune_result *r) {
    if (!r) return;
    free(r->trials);
    r->trials = NULL;
    r->ntrials = 0;
}
