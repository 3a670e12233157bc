/*
 * example.c — the C API end to end, beside the CUDA runtime API (as in a
 * training stack): cross-entropy of random logits, checked against the CPU,
 * then timed, with the host cost of the plan lookup. It includes xent.h alone,
 * as a program outside this tree would.
 *
 *   build/xent-example [N C]      (default 32768 4096)
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>

#include "xent.h"

#define CUDA_OK(call)                                                                                                  \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                                                \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* The mean loss in float64 on the CPU, every target valid: the mean over rows
 * of lse - x[target], the row's maximum taken out before the exponentials. */
static double cpu_mean_loss(const float *logits, const long long *targets, long long n, long long c) {
    double sum = 0.0;
    for (long long i = 0; i < n; i++) {
        const float *row = logits + i * c;
        double m = row[0], s = 0.0;
        for (long long j = 1; j < c; j++) m = row[j] > m ? row[j] : m;
        for (long long j = 0; j < c; j++) s += exp(row[j] - m);
        sum += m + log(s) - row[targets[i]];
    }
    return sum / (double)n;
}

int main(int argc, char **argv) {
    long long n = argc > 2 ? atoll(argv[1]) : 32768, c = argc > 2 ? atoll(argv[2]) : 4096;
    if (n < 1 || c < 1) return fprintf(stderr, "usage: %s [N C]\n", argv[0]), 2;
    float *logits = malloc((size_t)n * c * sizeof *logits);
    long long *targets = malloc((size_t)n * sizeof *targets);
    if (!logits || !targets) return 1;
    srand(1);
    for (long long i = 0; i < n * c; i++) logits[i] = rand() / (RAND_MAX + 1.0f);
    for (long long i = 0; i < n; i++) targets[i] = rand() % c;

    float *d_logits, *d_loss;
    long long *d_targets;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMalloc((void **)&d_logits, (size_t)n * c * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&d_targets, (size_t)n * sizeof(long long)));
    CUDA_OK(cudaMalloc((void **)&d_loss, sizeof(float)));
    CUDA_OK(cudaMemcpy(d_logits, logits, (size_t)n * c * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_targets, targets, (size_t)n * sizeof(long long), cudaMemcpyHostToDevice));

    /* The library part: a context, a problem, a launch on our stream. */
    xent_context *ctx;
    int rc = xent_context_create(&ctx, 0);
    if (rc) {
        fprintf(stderr, "xent_context_create: %s: %s\n", xent_errstr(rc), xent_errmsg(ctx));
        xent_context_destroy(ctx);
        return 3;
    }
    xent_problem p;
    xent_problem_init(&p, n, c); /* fp32, int64 targets, mean, ignore_index -100 */
    xent_args args = {.logits = d_logits, .targets = d_targets, .loss = d_loss};
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    rc = xent_forward(ctx, &p, &args, stream);
    if (!rc) rc = xent_check_targets(ctx, stream); /* synchronizes; reports bad targets */
    if (rc) {
        fprintf(stderr, "xent_forward: %s: %s\n", xent_errstr(rc), xent_errmsg(ctx));
        return 1;
    }
    float loss;
    CUDA_OK(cudaMemcpy(&loss, d_loss, sizeof loss, cudaMemcpyDeviceToHost));
    double ref = cpu_mean_loss(logits, targets, n, c), err = fabs(loss - ref) / fabs(ref);

    xent_plan *plan;
    char desc[XENT_DESCRIBE_LEN];
    if ((rc = xent_plan_get(ctx, &p, &plan)) || (rc = xent_plan_describe(plan, desc, sizeof desc))) {
        fprintf(stderr, "xent_plan_get: %s: %s\n", xent_errstr(rc), xent_errmsg(ctx));
        return 1;
    }
    printf("loss %.7f (float64 CPU reference %.7f, rel err %.2e)\nplan: %s\n", loss, ref, err, desc);

    /* Host cost of the steady-state lookup, then GPU time per call. */
    const int lookups = 1000000;
    double t0 = now_us();
    for (int i = 0; i < lookups; i++) xent_plan_get(ctx, &p, &plan);
    double lookup_us = (now_us() - t0) / lookups;
    const int calls = 200;
    t0 = now_us();
    for (int i = 0; i < calls; i++) xent_forward(ctx, &p, &args, stream);
    double host_us = (now_us() - t0) / calls;
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    CUDA_OK(cudaEventRecord(a, stream));
    for (int i = 0; i < calls; i++) xent_forward(ctx, &p, &args, stream);
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    printf("lookup %.3f us/call (host), xent_forward %.2f us/call (host, enqueue), %.2f us/call on the GPU "
           "(back to back), %.0f GB/s\n",
           lookup_us, host_us, ms * 1000 / calls, (n * c * 4.0 + n * 8.0) / (ms * 1e6 / calls));
    xent_context_destroy(ctx);
    return err <= 1e-5 ? 0 : 1;
}
