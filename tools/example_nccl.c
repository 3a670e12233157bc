/*
 * example_nccl.c — a vocabulary split across the GPUs of one machine, with
 * NCCL, as a C training stack would do it: every GPU holds the columns
 * [V*r/K, V*(r+1)/K) of fp32 logits and all the targets; each computes its
 * shard's per-row partials (XENT_OP_FORWARD with vocab > c), NCCL all-gathers
 * them, each GPU combines them into the mean loss and the rows' global lse
 * (XENT_OP_COMBINE), and each writes the gradient of its own columns
 * (XENT_OP_BACKWARD). The loss and every gradient column are checked against
 * float64 on the CPU, then the step is timed. It includes xent.h and nccl.h
 * alone, as a program outside this tree would.
 *
 *   build/xent-example-nccl [N V]      (default 4096 32000; every visible GPU)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "xent.h"

#define MAX_GPUS 16

#define CUDA_OK(call)                                                                                                  \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define NCCL_OK(call)                                                                                                  \
    do {                                                                                                               \
        ncclResult_t r_ = (call);                                                                                      \
        if (r_ != ncclSuccess) {                                                                                       \
            fprintf(stderr, "%s: %s\n", #call, ncclGetErrorString(r_));                                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define XENT_OK(ctx, call)                                                                                             \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != XENT_OK) {                                                                                          \
            fprintf(stderr, "%s: %s: %s\n", #call, xent_errstr(rc_), (ctx) ? xent_errmsg(ctx) : "");                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* One GPU's part: its columns, buffers, context and the plans of its three steps. */
typedef struct shard {
    int64_t lo, c;
    float *logits, *stats, *gathered, *loss, *lse, *grad, *dloss, *scratch;
    long long *targets;
    cudaStream_t stream;
    xent_context *ctx;
    xent_plan *fwd, *comb, *bwd;
} shard;

static int64_t n, vocab;
static int k;
static shard sh[MAX_GPUS];
static ncclComm_t comms[MAX_GPUS];

static void plans(shard *s) {
    xent_problem p;
    xent_problem_init(&p, n, s->c);
    p.vocab = vocab;
    p.class_offset = s->lo;
    XENT_OK(s->ctx, xent_plan_get(s->ctx, &p, &s->fwd));
    p.op = XENT_OP_BACKWARD;
    XENT_OK(s->ctx, xent_plan_get(s->ctx, &p, &s->bwd));
    xent_problem_init(&p, n, vocab);
    p.op = XENT_OP_COMBINE;
    p.shards = k;
    p.write_lse = 1;
    XENT_OK(s->ctx, xent_plan_get(s->ctx, &p, &s->comb));
}

/* The step: partials, all-gather, combine, gradient; queued on every GPU's stream. */
static void step(void) {
    for (int r = 0; r < k; r++) {
        shard *s = &sh[r];
        CUDA_OK(cudaSetDevice(r));
        xent_args a = {.logits = s->logits, .targets = s->targets, .loss = s->scratch, .stats = s->stats};
        XENT_OK(s->ctx, xent_plan_launch(s->fwd, s->stream, &a));
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < k; r++)
        NCCL_OK(ncclAllGather(sh[r].stats, sh[r].gathered, (size_t)(2 * n), ncclFloat, comms[r], sh[r].stream));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < k; r++) {
        shard *s = &sh[r];
        CUDA_OK(cudaSetDevice(r));
        xent_args c = {.targets = s->targets, .loss = s->loss, .lse = s->lse, .stats = s->gathered};
        XENT_OK(s->ctx, xent_plan_launch(s->comb, s->stream, &c));
        xent_args b = {.logits = s->logits, .targets = s->targets, .lse = s->lse, .grad = s->grad, .dloss = s->dloss};
        XENT_OK(s->ctx, xent_plan_launch(s->bwd, s->stream, &b));
    }
}

static void sync_all(void) {
    for (int r = 0; r < k; r++) {
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaStreamSynchronize(sh[r].stream));
    }
}

/* Each row's lse in float64, and the mean loss. */
static double cpu_reference(const float *x, const long long *t, double *lse) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = x + i * vocab;
        double m = row[0], s = 0.0;
        for (int64_t j = 1; j < vocab; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j < vocab; j++) s += exp(row[j] - m);
        lse[i] = m + log(s);
        sum += lse[i] - row[t[i]];
    }
    return sum / (double)n;
}

static void setup(const float *x, const long long *t) {
    for (int r = 0; r < k; r++) {
        shard *s = &sh[r];
        s->lo = vocab * r / k;
        s->c = vocab * (r + 1) / k - s->lo;
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaStreamCreate(&s->stream));
        XENT_OK(NULL, xent_context_create(&s->ctx, r));
        size_t bytes = (size_t)n * (size_t)s->c * sizeof(float);
        CUDA_OK(cudaMalloc((void **)&s->logits, bytes));
        CUDA_OK(cudaMalloc((void **)&s->grad, bytes));
        CUDA_OK(cudaMalloc((void **)&s->targets, (size_t)n * sizeof(long long)));
        CUDA_OK(cudaMalloc((void **)&s->stats, (size_t)(2 * n) * sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&s->gathered, (size_t)(2 * n) * (size_t)k * sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&s->lse, (size_t)n * sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&s->loss, sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&s->scratch, sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&s->dloss, sizeof(float)));
        const float one = 1.0f;
        CUDA_OK(cudaMemcpy(s->dloss, &one, sizeof one, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy2D(s->logits, (size_t)s->c * sizeof(float), x + s->lo, (size_t)vocab * sizeof(float),
                             (size_t)s->c * sizeof(float), (size_t)n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(s->targets, t, (size_t)n * sizeof(long long), cudaMemcpyHostToDevice));
        plans(s);
    }
}

/* The loss on every GPU, and every GPU's gradient columns, against float64. */
static int check(const float *x, const long long *t) {
    double *lse = malloc((size_t)n * sizeof *lse);
    float *g = malloc((size_t)n * (size_t)vocab * sizeof *g);
    if (!lse || !g) return fprintf(stderr, "out of memory\n"), 1;
    double ref = cpu_reference(x, t, lse), worst_loss = 0.0, worst_grad = 0.0;
    float loss = 0.0f;
    for (int r = 0; r < k; r++) {
        shard *s = &sh[r];
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaMemcpy(&loss, s->loss, sizeof loss, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy2D(g + s->lo, (size_t)vocab * sizeof(float), s->grad, (size_t)s->c * sizeof(float),
                             (size_t)s->c * sizeof(float), (size_t)n, cudaMemcpyDeviceToHost));
        worst_loss = fmax(worst_loss, fabs(loss - ref) / fabs(ref));
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < vocab; j++) {
            double want = (exp(x[i * vocab + j] - lse[i]) - (j == t[i])) / (double)n;
            worst_grad = fmax(worst_grad, fabs(g[i * vocab + j] - want));
        }
    /* a gradient element is at most 1/N: 1e-4 of that is float32's rounding over long rows */
    int ok = worst_loss < 1e-5 && worst_grad < 1e-4 / (double)n;
    printf("%d GPUs, %lldx%lld fp32: loss %.7f (float64 %.7f), worst relative loss error of the %d GPUs %.2e, "
           "worst gradient error %.2e: %s\n",
           k, (long long)n, (long long)vocab, loss, ref, k, worst_loss, worst_grad, ok ? "ok" : "MISMATCH");
    free(lse);
    free(g);
    return ok ? 0 : 1;
}

static double time_steps(int iters) {
    cudaEvent_t a, b;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    sync_all();
    CUDA_OK(cudaEventRecord(a, sh[0].stream));
    for (int i = 0; i < iters; i++) step();
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventRecord(b, sh[0].stream));
    sync_all();
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e3 / iters;
}

int main(int argc, char **argv) {
    n = argc > 2 ? atoll(argv[1]) : 4096;
    vocab = argc > 2 ? atoll(argv[2]) : 32000;
    CUDA_OK(cudaGetDeviceCount(&k));
    if (k > MAX_GPUS) k = MAX_GPUS;
    if (n < 1 || vocab < 2 * k) return fprintf(stderr, "usage: %s [N V], V >= 2 x GPUs\n", argv[0]), 2;
    if (k < 1) return fprintf(stderr, "%s: no GPU\n", argv[0]), 2;
    if (k == 1) /* NCCL takes one rank a GPU: the whole vocabulary is one shard, the all-gather a copy */
        printf("1 GPU: one shard of the whole vocabulary (check_grad splits one GPU's vocabulary into shards)\n");
    float *x = malloc((size_t)n * (size_t)vocab * sizeof *x);
    long long *t = malloc((size_t)n * sizeof *t);
    if (!x || !t) return fprintf(stderr, "out of memory\n"), 1;
    srand(1);
    for (int64_t i = 0; i < n * vocab; i++) x[i] = 4.0f * rand() / (RAND_MAX + 1.0f);
    for (int64_t i = 0; i < n; i++) t[i] = rand() % vocab;
    int devs[MAX_GPUS];
    for (int r = 0; r < k; r++) devs[r] = r;
    NCCL_OK(ncclCommInitAll(comms, k, devs));
    setup(x, t);
    step();
    sync_all();
    int rc = check(x, t);
    if (rc == 0) {
        step(); /* warm */
        printf("a step (partials, all-gather, combine, gradient) on %d GPUs: %.1f us\n", k, time_steps(20));
    }
    for (int r = 0; r < k; r++) {
        CUDA_OK(cudaSetDevice(r));
        cudaFree(sh[r].logits), cudaFree(sh[r].grad), cudaFree(sh[r].targets), cudaFree(sh[r].stats);
        cudaFree(sh[r].gathered), cudaFree(sh[r].lse), cudaFree(sh[r].loss), cudaFree(sh[r].scratch);
        cudaFree(sh[r].dloss);
        cudaStreamDestroy(sh[r].stream);
        xent_context_destroy(sh[r].ctx);
        ncclCommDestroy(comms[r]);
    }
    free(x);
    free(t);
    return rc;
}
