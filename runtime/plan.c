/* runtime/plan.c — problem → plan: the memo, the tune-cache lookup order,
 * the build (compile or cached CUBIN, module load, grid and workspace). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/gen.h"
#include "runtime/runtime.h"

void xent_tc_key_for(const char *gpu, int arch, int sm_count, const xent_problem *p, tc_key *key) {
    memset(key, 0, sizeof *key);
    snprintf(key->gpu, sizeof key->gpu, "%s", gpu);
    key->arch = arch;
    key->sm_count = sm_count;
    snprintf(key->family, sizeof key->family, "%s", xent_problem_family_name(p));
    key->logits = p->logits;
    key->targets = p->targets;
    key->reduction = p->reduction;
    key->options = (p->has_weights ? TC_OPT_WEIGHTS : 0) | (p->label_smoothing > 0 ? TC_OPT_SMOOTHING : 0) |
                   (p->write_lse ? TC_OPT_LSE : 0) | (p->row_stride != p->c ? TC_OPT_STRIDED : 0) |
                   (p->z_loss > 0 ? TC_OPT_ZLOSS : 0) | (p->softcap > 0 ? TC_OPT_SOFTCAP : 0) |
                   (p->vocab ? TC_OPT_SHARD : 0);
    key->n = p->n;
    key->c = p->c;
    key->template_version = XENT_TEMPLATE_VERSION;
    xent_tc_stamp(key);
}

void xent_tc_key(const xent_context *ctx, const xent_problem *p, tc_key *key) {
    xent_tc_key_for(ctx->info.key, ctx->arch, ctx->info.sm_count, p, key);
}

/* The caches are opened at the first plan miss; an unreadable one is noted, not fatal. */
static xent_source choose_config(xent_context *ctx, const xent_problem *p, xent_config *cfg, tc_answer *a) {
    if (p->op == XENT_OP_COMBINE || p->op == XENT_OP_RESCALE) { /* fixed kernels, nothing to tune */
        memset(a, 0, sizeof *a);
        xent_config_heuristic(p, ctx->info.sm_count, cfg);
        return XENT_SOURCE_HEURISTIC;
    }
    if (!ctx->caches.opened)
        xent_caches_open(&ctx->caches, ctx->info.key, ctx->arch, ctx->info.sm_count, xent_datadir());
    tc_key key;
    xent_tc_key(ctx, p, &key);
    return xent_choose_config(&ctx->caches, &key, p, cfg, a);
}

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* xent_grad's workspace header: tickets, the weight sums, the denominator's partials. */
#define GRAD_PARTS_AT (32 + 16 * 256)
#define GRAD_DENOM_BLOCKS 256
/* Blocks of the fixed kernels (combine, rescale) a multiprocessor gets. */
#define AUX_BLOCKS_PER_SM 8
/* Rounds of blocks the grad family's rows kernel launches, as multiples of the blocks the GPU
 * holds: fewer rounds leave fewer block partials for a sum's or mean's last block, more rounds
 * even out the tail of the rows. Eight were faster than four on every fused and backward plan
 * timed both ways; the fused rows take sixteen where no block's partial arrives (reduction
 * none) or a block's row is stashed: those were faster still at sixteen, while a sum or mean of
 * rows held in registers paid 1.5-12% more for the arrivals (bench/ab/log.md, "The grid").
 * Neither the backward nor clusters of blocks (SPLIT > 1) were timed past eight. */
#define GRAD_ROUNDS 8
#define GRAD_ROUNDS_FUSED_LONG 16

static long long grad_rounds(const xent_problem *p, const xent_config *cfg) {
    if (p->op != XENT_OP_FUSED || cfg->split != 1) return GRAD_ROUNDS;
    int unsummed = p->reduction == XENT_REDUCE_NONE, stashed = xent_config_smem(cfg, p) > 0;
    return unsummed || stashed ? GRAD_ROUNDS_FUSED_LONG : GRAD_ROUNDS;
}

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

/* Blocks of cfg's kernel fn the GPU holds at once (at least one an SM). */
static int resident_blocks(xent_context *ctx, CUfunction fn, const xent_problem *p, const xent_config *cfg,
                           long long *resident) {
    int per_sm = 0;
    CUresult r = ctx->drv->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, cfg->block, xent_config_smem(cfg, p));
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuOccupancyMaxActiveBlocksPerMultiprocessor", r);
    *resident = (long long)(per_sm > 0 ? per_sm : 1) * ctx->info.sm_count;
    return XENT_OK;
}

static int grad_launch_shape(xent_context *ctx, CUfunction fn, const xent_problem *p, const xent_config *cfg,
                             unsigned *grid, size_t *workspace) {
    long long sms = ctx->info.sm_count;
    if (p->op == XENT_OP_COMBINE)
        *grid = (unsigned)min_ll((p->n + 255) / 256, sms * AUX_BLOCKS_PER_SM);
    else if (p->op == XENT_OP_RESCALE)
        *grid = (unsigned)min_ll(p->n, sms * AUX_BLOCKS_PER_SM);
    else if (cfg->flat) { /* a tile a block, one shot: as many blocks as the stream has tiles (fits bounds them) */
        long long tile = (long long)cfg->block * cfg->items * cfg->vec;
        *grid = (unsigned)((p->n * p->c + tile - 1) / tile);
    } else {
        long long resident;
        int rc = resident_blocks(ctx, fn, p, cfg, &resident);
        if (rc) return rc;
        long long teams = cfg->block / cfg->tpr;
        long long groups = (p->n + teams - 1) / teams;
        resident /= cfg->split;
        *grid = (unsigned)(min_ll(groups, (resident > 0 ? resident : 1) * grad_rounds(p, cfg)) * cfg->split);
    }
    /* a flat backward's blocks publish nothing: its grid of tiles would size a workspace of partials for nothing */
    *workspace = GRAD_PARTS_AT + (cfg->flat ? 0 : 16 * (size_t)*grid);
    return XENT_OK;
}

int xent_launch_shape(xent_context *ctx, CUfunction fn, const xent_problem *p, const xent_config *cfg, unsigned *grid,
                      size_t *workspace) {
    if (xent_problem_family(p) == XENT_FAMILY_GRAD) return grad_launch_shape(ctx, fn, p, cfg, grid, workspace);
    long long groups = xent_fwd_groups(cfg, p), resident;
    int rc = resident_blocks(ctx, fn, p, cfg, &resident);
    if (rc) return rc;
    groups = xent_persistent_grid(groups, resident, cfg->persist);
    if (groups > 0x7fffffffLL) groups = 0x7fffffffLL; /* the grid-stride loop covers the rest */
    *grid = (unsigned)groups;
    size_t ws = 16 + 16 * (size_t)*grid;
    if (cfg->split > 1) { /* the template's layout: arrivals, partials, row results */
        size_t part_floats = 3 + (p->label_smoothing > 0 ? 1 + (p->has_weights ? 1 : 0) : 0);
        ws += align16((size_t)p->n * 4) + align16((size_t)p->n * cfg->split * part_floats * 4) + 16 * (size_t)p->n;
    }
    *workspace = ws;
    return XENT_OK;
}

/* Whether a plan's second kernel can be launched as a programmatic
 * dependent of its first: sm_90 and a driver that has cuLaunchKernelEx
 * (runtime/driver.c). */
static int dependent_launch(const xent_context *ctx) { return ctx->drv->LaunchKernelEx && ctx->arch >= 90; }

static int load_kernel(xent_context *ctx, xent_plan *plan) {
    xent_cubin bin;
    /* the compile log goes through xent_fail, which keeps each thread's message its own */
    char *log = malloc(sizeof ctx->errmsg);
    if (!log) return xent_fail(ctx, XENT_ENOMEM, "no memory for a compile log");
    log[0] = 0;
    int rc = xent_kernel_get(&plan->config, &plan->problem, ctx->arch, &bin, log, sizeof ctx->errmsg);
    if (rc) xent_fail(ctx, rc, "%s", log);
    free(log);
    if (rc) return rc;
    plan->registers = bin.registers;
    plan->spill_bytes = bin.spill_bytes;
    CUresult r = ctx->drv->ModuleLoadData(&plan->module, bin.data);
    xent_cubin_free(&bin);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuModuleLoadData", r);
    const xent_problem *p = &plan->problem;
    static const char *grad_entry[] = {"xent_grad", "xent_grad", "xent_grad", "xent_grad_combine", "xent_grad_rescale"};
    const char *entry = plan->family == XENT_FAMILY_GRAD ? grad_entry[p->op] : "xent_fwd";
    r = ctx->drv->ModuleGetFunction(&plan->fn, plan->module, entry);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuModuleGetFunction", r);
    /* a gradient scaled for a mean, or weighted smoothing, needs the weight sums first */
    if (plan->family == XENT_FAMILY_GRAD && (p->op == XENT_OP_FUSED || p->op == XENT_OP_BACKWARD) &&
        (p->reduction == XENT_REDUCE_MEAN || p->has_weights)) {
        r = ctx->drv->ModuleGetFunction(&plan->fn_denom, plan->module, "xent_grad_denom");
        if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuModuleGetFunction(xent_grad_denom)", r);
        long long g = (p->n + 255) / 256;
        plan->denom_grid = (unsigned)min_ll(g > 0 ? g : 1, GRAD_DENOM_BLOCKS);
        /* the rows start while the denominators are summed, and wait for them
         * (griddepcontrol.wait) only where they first read them */
        plan->dependent = dependent_launch(ctx);
    }
    /* Past 48 KB with the static shared memory, a block's dynamic shared
     * memory (TILE's rows, STASH's chunks) must be opted in to, or the launch fails. */
    if (plan->smem > 0) {
        r = ctx->drv->FuncSetAttribute(plan->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)plan->smem);
        if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r);
    }
    return XENT_OK;
}

/* A sum or mean whose kernel leaves its blocks' partials to xent_fwd_finish
 * (xent_fwd_finish_apart) launches it after the grid. */
static int choose_finish(xent_context *ctx, xent_plan *plan) {
    if (!xent_fwd_finish_apart(&plan->config, &plan->problem)) return XENT_OK;
    CUresult r = ctx->drv->ModuleGetFunction(&plan->fn_finish, plan->module, "xent_fwd_finish");
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuModuleGetFunction(xent_fwd_finish)", r);
    plan->dependent = dependent_launch(ctx);
    return XENT_OK;
}

static int alloc_workspace(xent_context *ctx, xent_plan *plan) {
    CUresult r = ctx->drv->MemAlloc(&plan->workspace, plan->workspace_size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return xent_fail(ctx, XENT_ENOMEM, "workspace of %zu bytes", plan->workspace_size);
    if (r == CUDA_SUCCESS) r = ctx->drv->MemsetD8(plan->workspace, 0, plan->workspace_size);
    /* cuMemset is ordered only on the legacy stream: finish it before a launch
     * on a non-blocking stream can overtake it. */
    if (r == CUDA_SUCCESS) r = ctx->drv->StreamSynchronize(NULL);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(ctx, "allocating the workspace", r);
}

int xent_plan_build(xent_context *ctx, const xent_problem *p, const xent_config *cfg, xent_source source,
                    xent_plan **out) {
    char why[256];
    *out = NULL;
    if (!xent_config_fits(cfg, p, why, sizeof why) || !xent_config_arch_fits(cfg, p, ctx->arch, why, sizeof why))
        return xent_fail(ctx, XENT_EINVAL, "configuration unusable here: %s", why);
    xent_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return XENT_ENOMEM;
    plan->ctx = ctx;
    xent_problem_normalize(p, &plan->problem);
    plan->config = *cfg;
    plan->source = source;
    plan->family = xent_problem_family(p);
    plan->block = (unsigned)cfg->block;
    if (plan->family == XENT_FAMILY_GRAD && (p->op == XENT_OP_COMBINE || p->op == XENT_OP_RESCALE))
        plan->block = 256; /* their entry points' fixed block */
    plan->smem = (unsigned)xent_config_smem(cfg, p);
    int pushed, rc = xent_ctx_enter(ctx, &pushed);
    if (rc) {
        free(plan);
        return rc;
    }
    if (!(rc = load_kernel(ctx, plan)) &&
        !(rc = xent_launch_shape(ctx, plan->fn, &plan->problem, cfg, &plan->grid, &plan->workspace_size)) &&
        !(rc = choose_finish(ctx, plan)))
        rc = alloc_workspace(ctx, plan);
    xent_ctx_leave(ctx, pushed);
    if (rc) {
        xent_plan_destroy(plan);
        return rc;
    }
    *out = plan;
    return XENT_OK;
}

void xent_plan_destroy(xent_plan *plan) {
    if (!plan) return;
    const xent_driver *d = plan->ctx->drv;
    int pushed = 0, entered = xent_ctx_enter(plan->ctx, &pushed) == XENT_OK;
    if (plan->workspace) d->MemFree(plan->workspace);
    if (plan->module) d->ModuleUnload(plan->module);
    if (entered) xent_ctx_leave(plan->ctx, pushed);
    free(plan);
}

static xent_plan *memo_find(xent_context *ctx, const xent_problem *key, uint64_t h) {
    if (!ctx->nslots) return NULL;
    for (size_t i = h & (ctx->nslots - 1);; i = (i + 1) & (ctx->nslots - 1)) {
        plan_slot *s = &ctx->slots[i];
        if (!s->plan) return NULL;
        if (s->hash == h && !memcmp(&s->plan->problem, key, sizeof *key)) return s->plan;
    }
}

static void memo_put(plan_slot *slots, size_t nslots, xent_plan *plan, uint64_t h) {
    size_t i = h & (nslots - 1);
    while (slots[i].plan) i = (i + 1) & (nslots - 1);
    slots[i].hash = h;
    slots[i].plan = plan;
}

static int memo_insert(xent_context *ctx, xent_plan *plan, uint64_t h) {
    if (2 * (ctx->nplans + 1) > ctx->nslots) { /* keep the table at most half full */
        size_t n = ctx->nslots ? 2 * ctx->nslots : 16;
        plan_slot *slots = calloc(n, sizeof *slots);
        if (!slots) return XENT_ENOMEM;
        for (size_t i = 0; i < ctx->nslots; i++)
            if (ctx->slots[i].plan) memo_put(slots, n, ctx->slots[i].plan, ctx->slots[i].hash);
        free(ctx->slots);
        ctx->slots = slots;
        ctx->nslots = n;
    }
    memo_put(ctx->slots, ctx->nslots, plan, h);
    ctx->nplans++;
    return XENT_OK;
}

static int plan_miss(xent_context *ctx, const xent_problem *key, uint64_t h, xent_plan **plan) {
    xent_config cfg;
    tc_answer a;
    xent_source src = choose_config(ctx, key, &cfg, &a);
    int rc = xent_plan_build(ctx, key, &cfg, src, plan);
    if (rc) return rc;
    snprintf((*plan)->cache, sizeof(*plan)->cache, "%s", a.cache);
    snprintf((*plan)->note, sizeof(*plan)->note, "%s", a.note);
    if ((rc = memo_insert(ctx, *plan, h))) {
        xent_plan_destroy(*plan);
        *plan = NULL;
    }
    return rc;
}

int xent_plan_get(xent_context *ctx, const xent_problem *p, xent_plan **plan) {
    char why[256];
    if (!ctx || !plan) return xent_fail(ctx, XENT_EINVAL, "xent_plan_get: NULL argument");
    *plan = NULL;
    if (xent_problem_check(p, why, sizeof why)) return xent_fail(ctx, XENT_EINVAL, "problem: %s", why);
    if (!ctx->cuctx) return xent_fail(ctx, XENT_ENODEVICE, "context has no device");
    xent_problem key;
    xent_problem_normalize(p, &key);
    uint64_t h = xent_text_hash(&key, sizeof key); /* normalized: its padding is zeroed */
    /* Lookups share the lock, so a thread building a new plan (a compile)
     * never stalls launches of plans already built. */
    pthread_rwlock_rdlock(&ctx->lock);
    *plan = memo_find(ctx, &key, h);
    pthread_rwlock_unlock(&ctx->lock);
    if (*plan) return XENT_OK;
    pthread_rwlock_wrlock(&ctx->lock);
    int rc = XENT_OK;
    if (!(*plan = memo_find(ctx, &key, h))) rc = plan_miss(ctx, &key, h, plan); /* another thread may have won */
    pthread_rwlock_unlock(&ctx->lock);
    return rc;
}

int xent_plan_lookup(xent_context *ctx, const xent_problem *p, xent_plan **plan) {
    char why[256];
    if (!ctx || !plan) return xent_fail(ctx, XENT_EINVAL, "xent_plan_lookup: NULL argument");
    *plan = NULL;
    if (xent_problem_check(p, why, sizeof why)) return xent_fail(ctx, XENT_EINVAL, "problem: %s", why);
    xent_problem key;
    xent_problem_normalize(p, &key);
    uint64_t h = xent_text_hash(&key, sizeof key); /* normalized: its padding is zeroed */
    pthread_rwlock_rdlock(&ctx->lock);
    *plan = memo_find(ctx, &key, h);
    pthread_rwlock_unlock(&ctx->lock);
    return *plan ? XENT_OK : XENT_ENOTFOUND;
}

xent_source xent_plan_source(const xent_plan *plan) { return plan ? plan->source : XENT_SOURCE_HEURISTIC; }

const char *xent_source_text(xent_source s) {
    static const char *sources[] = {"user-db", "shipped", "nearest", "heuristic", "explicit", "arch"};
    return (unsigned)s < sizeof sources / sizeof sources[0] ? sources[s] : "unknown";
}

/* A description: the configuration, the cache's name, the note, and under 100 bytes of the words
 * and numbers between them (source=, grid=, finish=apart, regs=). */
#define DESCRIBE_CFG_LEN 200
_Static_assert(DESCRIBE_CFG_LEN + sizeof(((xent_plan *)0)->cache) + sizeof(((xent_plan *)0)->note) + 100 <=
                   XENT_DESCRIBE_LEN,
               "XENT_DESCRIBE_LEN holds a description");

int xent_plan_describe(const xent_plan *plan, char *buf, size_t len) {
    if (!plan || !buf || !len) return XENT_EINVAL;
    char cfg[DESCRIBE_CFG_LEN];
    xent_config_format(&plan->config, cfg, sizeof cfg);
    int w = snprintf(buf, len, "%s source=%s%s%s grid=%u%s regs=%d%s%s", cfg, xent_source_text(plan->source),
                     plan->cache[0] ? " cache=" : "", plan->cache, plan->grid, plan->fn_finish ? " finish=apart" : "",
                     plan->registers, plan->note[0] ? " note=" : "", plan->note);
    return w >= 0 && (size_t)w < len ? XENT_OK : XENT_EINVAL;
}

size_t xent_workspace_size(const xent_plan *plan) { return plan ? plan->workspace_size : 0; }
