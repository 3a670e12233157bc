/* tune/bufs.c — the tuner's inputs: random host data, its float64
 * reference, and rotated device copies so small problems are not timed from L2. */
#include "tune/bufs.h"

#include <stdlib.h>
#include <string.h>

#include "tune/parallel.h"
#include "tune/reference.h"

/* Data touched per rotation must exceed this many L2s. */
#define L2_MULTIPLE 4
#define MAX_COPIES 64

static uint64_t next_random(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double uniform01(uint64_t *s) { return (double)(next_random(s) >> 11) * 0x1.0p-53; }

/* splitmix64: a chunk's generator from the seed and the chunk's index. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Logits are drawn in chunks of this many, each from its own generator, so
 * that threads fill them in parallel and the values never depend on how
 * many there are: one thread takes about 9 ns a 16-bit logit, 18 s for the
 * 4 GB problems the tuner is given. */
#define FILL_CHUNK ((size_t)1 << 20)

typedef struct fill_job {
    void *x;
    size_t count;
    xent_dtype dtype;
    uint64_t seed;
} fill_job;

static void fill_chunk(void *arg, int64_t chunk, int thread) {
    const fill_job *j = arg;
    const size_t k = (size_t)chunk;
    uint64_t s = mix(j->seed ^ mix(k)) | 1;
    size_t lo = k * FILL_CHUNK, hi = lo + FILL_CHUNK < j->count ? lo + FILL_CHUNK : j->count;
    (void)thread;
    if (j->dtype == XENT_F32)
        for (size_t i = lo; i < hi; i++) ((float *)j->x)[i] = (float)uniform01(&s);
    else
        for (size_t i = lo; i < hi; i++) {
            float f = (float)uniform01(&s);
            ((uint16_t *)j->x)[i] = j->dtype == XENT_F16 ? xent_float_to_half(f) : xent_float_to_bf16(f);
        }
}

void tune_fill_logits(void *x, size_t count, xent_dtype dtype, uint64_t seed, int threads) {
    fill_job job = {x, count, dtype, seed};
    tune_parallel((int64_t)((count + FILL_CHUNK - 1) / FILL_CHUNK), threads, fill_chunk, &job);
}

/* Logits like KernelBench's torch.rand (uniform [0, 1)), spread a little so
 * rows differ in their max; targets uniform over the classes. */
static void fill_host(tune_bufs *b, const xent_problem *p, uint64_t seed) {
    tune_fill_logits(b->host_logits, (size_t)p->n * (size_t)p->row_stride, p->logits, seed, 0);
    uint64_t s = mix(seed) | 1;
    for (int64_t i = 0; i < p->n; i++) {
        int64_t t = (int64_t)(next_random(&s) % (uint64_t)p->c);
        if (p->targets == XENT_I64)
            ((int64_t *)b->host_targets)[i] = t;
        else
            ((int32_t *)b->host_targets)[i] = (int32_t)t;
    }
    if (b->host_weights)
        for (int64_t j = 0; j < p->c; j++) b->host_weights[j] = (float)(0.25 + uniform01(&s));
}

static int alloc_host(tune_bufs *b, const xent_problem *p) {
    b->logits_bytes = (size_t)p->n * (size_t)p->row_stride * (size_t)xent_dtype_size(p->logits);
    b->targets_bytes = (size_t)p->n * (p->targets == XENT_I64 ? 8 : 4);
    b->out_count = p->reduction == XENT_REDUCE_NONE ? (size_t)p->n : 1;
    b->host_logits = malloc(b->logits_bytes);
    b->host_targets = malloc(b->targets_bytes);
    b->host_out = malloc(b->out_count * sizeof(float));
    b->ref = malloc(b->out_count * sizeof(double));
    if (p->has_weights) b->host_weights = malloc((size_t)p->c * sizeof(float));
    return b->host_logits && b->host_targets && b->host_out && b->ref && (!p->has_weights || b->host_weights)
               ? XENT_OK
               : XENT_ENOMEM;
}

static int copies_for(const xent_context *ctx, size_t bytes) {
    size_t want = L2_MULTIPLE * ctx->info.l2_bytes;
    int n = (int)((want + bytes - 1) / bytes);
    if (n < 2) n = 2;
    if (n > MAX_COPIES) n = MAX_COPIES;
    /* Never take more than half the card. */
    while (n > 1 && (size_t)n * bytes > ctx->info.global_mem_bytes / 2) n--;
    return n;
}

static int dev_alloc(xent_context *ctx, CUdeviceptr *p, size_t bytes, const void *host) {
    CUresult r = ctx->drv->MemAlloc(p, bytes ? bytes : 16);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return xent_fail(ctx, XENT_ENOMEM, "tuner inputs: %zu bytes", bytes);
    if (r == CUDA_SUCCESS && host) r = ctx->drv->MemcpyHtoD(*p, host, bytes);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(ctx, "tuner inputs", r);
}

/* Gradient rows the check compares: about this many, spread over the problem. */
#define GRAD_ROWS 512

/* Against the reference rounded to the dtype, a gradient rounded once (fused, backward) differs
 * only where the kernel's fp32 value and the float64 one round apart, an element in thousands
 * (1e-6 to 4e-6 in check_grad's 16-bit cases); a rescaled one was rounded twice, before and
 * after its factor, and is off by up to half a step in any element (4e-4 in f16). */
double tune_grad_tolerance(xent_dtype d, xent_op op) {
    if (d == XENT_F32) return 1e-5;
    if (op != XENT_OP_RESCALE) return 1e-4;
    return d == XENT_F16 ? 1e-3 : 8e-3;
}

/* The xent_grad family's reference (loss, lse, sampled gradient rows) and
 * its extra device buffers. */
static int grad_bufs(xent_context *ctx, const xent_problem *p, tune_bufs *b) {
    b->op = p->op;
    b->n = p->n, b->c = p->c, b->row_stride = p->row_stride, b->dtype = p->logits;
    b->grad_step = p->n > GRAD_ROWS ? p->n / GRAD_ROWS : 1;
    int64_t rows = (p->n + b->grad_step - 1) / b->grad_step;
    double *lse = malloc((size_t)p->n * sizeof *lse);
    float *lsef = malloc((size_t)p->n * sizeof *lsef), *ones = malloc((size_t)p->n * sizeof *ones);
    b->ref_grad = malloc((size_t)rows * (size_t)p->c * sizeof *b->ref_grad);
    b->host_grad = malloc(b->logits_bytes);
    int rc = lse && lsef && ones && b->ref_grad && b->host_grad ? XENT_OK : XENT_ENOMEM;
    if (!rc)
        rc = xent_ref_train(p, b->host_logits, b->host_targets, b->host_weights, NULL, b->ref, lse, b->ref_grad,
                            b->grad_step);
    for (int64_t i = 0; !rc && i < p->n; i++) {
        lsef[i] = (float)lse[i];
        ones[i] = 1.0f;
    }
    if (!rc) rc = dev_alloc(ctx, &b->grad, b->logits_bytes, NULL);
    if (!rc) rc = dev_alloc(ctx, &b->dloss, (size_t)p->n * sizeof(float), ones);
    if (!rc) rc = dev_alloc(ctx, &b->lse_in, (size_t)p->n * sizeof(float), lsef);
    if (p->op == XENT_OP_BACKWARD) b->out_count = 0; /* no loss: the gradient is the result */
    free(lse);
    free(lsef);
    free(ones);
    return rc ? xent_fail(ctx, rc, "tuner: gradient reference and buffers") : XENT_OK;
}

int tune_bufs_create(xent_context *ctx, const xent_problem *p, uint64_t seed, tune_bufs *b) {
    memset(b, 0, sizeof *b);
    int rc = alloc_host(b, p);
    if (rc) return xent_fail(ctx, rc, "tuner: host buffers for %lldx%lld", (long long)p->n, (long long)p->c);
    fill_host(b, p, seed);
    if (xent_problem_family(p) == XENT_FAMILY_GRAD)
        rc = grad_bufs(ctx, p, b);
    else
        rc = xent_ref_forward(p, b->host_logits, b->host_targets, b->host_weights, b->ref, NULL, NULL);
    if (rc) return xent_fail(ctx, rc, "tuner: reference failed");
    b->ncopies = copies_for(ctx, b->logits_bytes + b->targets_bytes);
    for (int i = 0; i < b->ncopies && !rc; i++)
        if (!(rc = dev_alloc(ctx, &b->logits[i], b->logits_bytes, b->host_logits)))
            rc = dev_alloc(ctx, &b->targets[i], b->targets_bytes, b->host_targets);
    if (!rc) rc = dev_alloc(ctx, &b->loss, b->out_count * sizeof(float), NULL);
    if (!rc && p->write_lse) rc = dev_alloc(ctx, &b->lse, (size_t)p->n * sizeof(float), NULL);
    if (!rc && p->has_weights) rc = dev_alloc(ctx, &b->weights, (size_t)p->c * sizeof(float), b->host_weights);
    return rc;
}

void tune_bufs_args(const tune_bufs *b, int copy, xent_args *a) {
    memset(a, 0, sizeof *a);
    a->logits = (const void *)b->logits[copy];
    a->targets = (const void *)b->targets[copy];
    a->weights = (const float *)b->weights;
    a->loss = (float *)b->loss;
    a->lse = (float *)b->lse;
    if (b->op == XENT_OP_FUSED || b->op == XENT_OP_BACKWARD) a->grad = (void *)b->grad;
    if (b->op == XENT_OP_BACKWARD) {
        a->loss = NULL;
        a->lse = (float *)b->lse_in;
        a->dloss = (const float *)b->dloss;
    }
}

void tune_bufs_destroy(xent_context *ctx, tune_bufs *b) {
    for (int i = 0; i < b->ncopies; i++) {
        if (b->logits[i]) ctx->drv->MemFree(b->logits[i]);
        if (b->targets[i]) ctx->drv->MemFree(b->targets[i]);
    }
    if (b->loss) ctx->drv->MemFree(b->loss);
    if (b->lse) ctx->drv->MemFree(b->lse);
    if (b->weights) ctx->drv->MemFree(b->weights);
    if (b->grad) ctx->drv->MemFree(b->grad);
    if (b->dloss) ctx->drv->MemFree(b->dloss);
    if (b->lse_in) ctx->drv->MemFree(b->lse_in);
    free(b->ref_grad);
    free(b->host_grad);
    free(b->host_logits);
    free(b->host_targets);
    free(b->host_weights);
    free(b->host_out);
    free(b->ref);
    memset(b, 0, sizeof *b);
}

/* Relative error of the device result against the reference, by norms;
 * NaN never passes unless the reference is NaN too (xent_rel_err_vec). */
double tune_bufs_error(const tune_bufs *b) { return xent_rel_err_vec(b->host_out, b->ref, (int64_t)b->out_count); }

/* Past this many bytes a gradient is read back row by row, only the rows
 * the check compares (about 512), not the gigabytes of a large problem's
 * gradient for every candidate. */
#define GRAD_READ_ALL_BYTES ((size_t)64 << 20)

CUresult tune_bufs_read_grad(const xent_driver *d, tune_bufs *b) {
    if (b->logits_bytes <= GRAD_READ_ALL_BYTES || b->grad_step <= 1)
        return d->MemcpyDtoH(b->host_grad, b->grad, b->logits_bytes);
    const size_t esize = b->dtype == XENT_F32 ? 4 : 2, row = (size_t)b->row_stride * esize;
    CUresult r = CUDA_SUCCESS;
    for (int64_t i = 0; i < b->n && r == CUDA_SUCCESS; i += b->grad_step)
        r = d->MemcpyDtoH((char *)b->host_grad + (size_t)i * row, b->grad + (size_t)i * row, (size_t)b->c * esize);
    return r;
}

double tune_bufs_grad_error(const tune_bufs *b) {
    if (!b->ref_grad || b->op == XENT_OP_FORWARD) return 0.0;
    xent_err_acc acc = {0};
    for (int64_t i = 0; i < b->n && !acc.bad; i += b->grad_step)
        for (int64_t j = 0; j < b->c; j++)
            xent_err_acc_add(&acc, xent_ref_elem(b->host_grad, b->dtype, i * b->row_stride + j),
                             xent_ref_round(b->dtype, b->ref_grad[i / b->grad_step * b->c + j]));
    return xent_err_acc_value(&acc);
}
