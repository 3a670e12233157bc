/*
 * check_inputs.c — Check suite of the tuner's buffers (tune/bufs.c): its
 * random logits (tune_fill_logits) are the same whatever the number of
 * threads filling them, every value in [0, 1] (uniform [0, 1) rounded to the
 * logits' type), with a seed of their own; a gradient is read back whole when
 * small, else the rows the check compares (tune_bufs_read_grad); a gradient
 * is judged against its reference rounded to its dtype (tune_bufs_grad_error).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tune/bufs.h"
#include "tune/reference.h"
#include "tests/run_suite.h"

/* The fill's chunk (FILL_CHUNK in tune/bufs.c): counts around it cross chunk edges. */
#define CHUNK ((size_t)1 << 20)

static const struct {
    xent_dtype dtype;
    size_t count;
    int threads;
} cases[] = {
    {XENT_F32, 1, 4},
    {XENT_F16, 1000, 3},
    {XENT_BF16, CHUNK - 1, 2},
    {XENT_F32, CHUNK, 3},
    {XENT_F16, 2 * CHUNK + 5, 2},
    {XENT_BF16, 3 * CHUNK + 1, 8},
    {XENT_F32, 5 * CHUNK + 17, 32},
    {XENT_F16, 2 * CHUNK, 0}, /* 0: the online CPUs */
};

START_TEST(fill_is_the_same_for_any_threads) {
    const xent_dtype d = cases[_i].dtype;
    const size_t n = cases[_i].count, size = d == XENT_F32 ? 4 : 2;
    unsigned char *one = malloc(n * size), *many = malloc(n * size), *other = malloc(n * size);
    ck_assert(one && many && other);
    tune_fill_logits(one, n, d, 0x5eedull, 1);
    tune_fill_logits(many, n, d, 0x5eedull, cases[_i].threads);
    ck_assert_msg(memcmp(one, many, n * size) == 0, "%zu logits differ between 1 and %d threads", n, cases[_i].threads);
    double sum = 0.0;
    size_t outside = 0, first = 0; /* counted, not asserted a value: an assertion costs a system call */
    for (size_t i = 0; i < n; i++) {
        double v = xent_ref_elem(one, d, (int64_t)i);
        if (!(v >= 0.0 && v <= 1.0) && !outside++) first = i;
        sum += v;
    }
    ck_assert_msg(!outside, "%zu logits outside [0, 1], the first at %zu: %g", outside, first,
                  xent_ref_elem(one, d, (int64_t)first));
    if (n >= 1000) ck_assert_msg(sum / (double)n > 0.45 && sum / (double)n < 0.55, "mean %g", sum / (double)n);
    tune_fill_logits(other, n, d, 0x5eedull + 1, cases[_i].threads);
    if (n >= 16) ck_assert_msg(memcmp(one, other, n * size) != 0, "another seed gave the same %zu logits", n);
    free(one);
    free(many);
    free(other);
}
END_TEST

/* A driver whose device pointers are host pointers, counting the copies back. */
static int copies;
static CUresult copy_back(void *h, CUdeviceptr dev, size_t n) {
    copies++;
    memcpy(h, (const void *)(uintptr_t)dev, n);
    return CUDA_SUCCESS;
}

static const struct {
    int64_t n, c, stride, step;
    xent_dtype dtype;
    int want_copies; /* 1: the whole gradient at once */
} reads[] = {
    {1024, 1000, 1000, 2, XENT_F32, 1},    /* 4 MB: whole */
    {8192, 4096, 4096, 16, XENT_BF16, 1},  /* 64 MB: whole */
    {4096, 8200, 8200, 8, XENT_F32, 512},  /* 134 MB: the compared rows */
    {4100, 8192, 8200, 8, XENT_BF16, 513}, /* padded rows: c of each, rows 0, 8, ..., 4096 */
    {40000, 1000, 1000, 1, XENT_F32, 1},   /* every row compared: whole */
};

START_TEST(read_grad_reads_the_compared_rows) {
    const size_t esize = reads[_i].dtype == XENT_F32 ? 4 : 2;
    tune_bufs b;
    memset(&b, 0, sizeof b);
    b.n = reads[_i].n, b.c = reads[_i].c, b.row_stride = reads[_i].stride, b.grad_step = reads[_i].step;
    b.dtype = reads[_i].dtype;
    b.logits_bytes = (size_t)b.n * (size_t)b.row_stride * esize;
    unsigned char *dev = malloc(b.logits_bytes), *host = calloc(1, b.logits_bytes);
    ck_assert(dev && host);
    for (size_t i = 0; i < b.logits_bytes; i++) dev[i] = (unsigned char)(i * 7 + 1);
    b.grad = (CUdeviceptr)(uintptr_t)dev;
    b.host_grad = host;
    xent_driver d;
    memset(&d, 0, sizeof d);
    d.MemcpyDtoH = copy_back;
    copies = 0;
    ck_assert_int_eq(tune_bufs_read_grad(&d, &b), CUDA_SUCCESS);
    ck_assert_int_eq(copies, reads[_i].want_copies);
    const size_t row = (size_t)b.row_stride * esize;
    for (int64_t r = 0; r < b.n; r += b.grad_step)
        ck_assert_msg(memcmp(host + (size_t)r * row, dev + (size_t)r * row, (size_t)b.c * esize) == 0,
                      "row %lld not read back", (long long)r);
    free(dev);
    free(host);
}
END_TEST

/* A mean's gradient over `rows` rows of 4096 classes, 4 of them compared: what a kernel stores
 * (the exact value rounded to the dtype, the target's off by a factor `off`) against the
 * float64 reference. An f16 mean of 32768 rows puts every class but the target under half of
 * f16's smallest step, where the stored 0 is exact and only the unrounded reference differs.
 * A rescaled gradient (rounded twice) may be off by a step where one rounded once may not. */
static const struct {
    xent_dtype dtype;
    xent_op op;
    double rows, off;
    int within; /* 1: within tune_grad_tolerance */
    int zeros;  /* 1: most of each row stores as 0 */
} grads[] = {
    {XENT_F16, XENT_OP_FUSED, 32768, 0.0, 1, 1},     {XENT_F16, XENT_OP_FUSED, 32768, 0.01, 0, 1},
    {XENT_F16, XENT_OP_FUSED, 1, 0.0, 1, 0},         {XENT_F16, XENT_OP_FUSED, 1, 0.01, 0, 0},
    {XENT_BF16, XENT_OP_FUSED, 32768, 0.0, 1, 0},    {XENT_BF16, XENT_OP_FUSED, 32768, 0.05, 0, 0},
    {XENT_F32, XENT_OP_FUSED, 32768, 0.0, 1, 0},     {XENT_F32, XENT_OP_FUSED, 32768, 1e-4, 0, 0},
    {XENT_F16, XENT_OP_BACKWARD, 1, 0.0006, 0, 0},   {XENT_F16, XENT_OP_RESCALE, 1, 0.0006, 1, 0},
    {XENT_BF16, XENT_OP_BACKWARD, 1, 0.006, 0, 0},   {XENT_BF16, XENT_OP_RESCALE, 1, 0.006, 1, 0},
    {XENT_F32, XENT_OP_RESCALE, 32768, 1e-4, 0, 0},
};

START_TEST(grad_error_is_against_the_rounded_reference) {
    enum { N = 4, C = 4096 };
    const xent_dtype d = grads[_i].dtype;
    double *ref = malloc(N * C * sizeof *ref);
    uint16_t *g16 = malloc(N * C * sizeof *g16);
    float *g32 = malloc(N * C * sizeof *g32);
    ck_assert(ref && g16 && g32);
    int zeros = 0;
    for (int i = 0; i < N; i++) {
        double z = 0.0;
        for (int j = 0; j < C; j++) z += exp((double)((i * 7 + j) % 97) / 97.0);
        for (int j = 0; j < C; j++) {
            const int t = (i * 1031) % C, k = i * C + j;
            ref[k] = (exp((double)((i * 7 + j) % 97) / 97.0) / z - (j == t)) / grads[_i].rows;
            const float v = (float)(ref[k] * (j == t ? 1.0 + grads[_i].off : 1.0));
            g32[k] = v;
            g16[k] = d == XENT_F16 ? xent_float_to_half(v) : xent_float_to_bf16(v);
            zeros += d == XENT_F32 ? v == 0.0f : (g16[k] & 0x7fffu) == 0;
        }
    }
    tune_bufs b;
    memset(&b, 0, sizeof b);
    b.op = grads[_i].op, b.n = N, b.c = C, b.row_stride = C, b.grad_step = 1, b.dtype = d;
    b.ref_grad = ref;
    b.host_grad = d == XENT_F32 ? (void *)g32 : (void *)g16;
    const double err = tune_bufs_grad_error(&b), tol = tune_grad_tolerance(d, grads[_i].op);
    ck_assert_msg((err <= tol) == grads[_i].within, "error %g against a tolerance of %g", err, tol);
    ck_assert_msg((zeros > N * C / 2) == grads[_i].zeros, "%d of %d gradients stored as 0", zeros, N * C);
    free(ref);
    free(g16);
    free(g32);
}
END_TEST

int main(void) {
    Suite *s = suite_create("inputs");
    TCase *tc = tcase_create("fill");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, fill_is_the_same_for_any_threads, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, read_grad_reads_the_compared_rows, 0, (int)(sizeof reads / sizeof reads[0]));
    tcase_add_loop_test(tc, grad_error_is_against_the_rounded_reference, 0, (int)(sizeof grads / sizeof grads[0]));
    suite_add_tcase(s, tc);
    return run_suite(s);
}
