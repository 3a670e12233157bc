/*
 * check_inputs.c — Check suite of the tuner's random logits (tune/bufs.c,
 * tune_fill_logits): the same values whatever the number of threads filling
 * them, every value in [0, 1] (uniform [0, 1) rounded to the logits' type),
 * and a seed of their own.
 */
#include <check.h>
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
    {XENT_F32, 1, 4},                {XENT_F16, 1000, 3},         {XENT_BF16, CHUNK - 1, 2},
    {XENT_F32, CHUNK, 3},            {XENT_F16, 2 * CHUNK + 5, 2}, {XENT_BF16, 3 * CHUNK + 1, 8},
    {XENT_F32, 5 * CHUNK + 17, 32},  {XENT_F16, 2 * CHUNK, 0}, /* 0: the online CPUs */
};

static double value(const void *x, xent_dtype d, size_t i) {
    if (d == XENT_F32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return d == XENT_F16 ? xent_half_to_float(h) : xent_bf16_to_float(h);
}

START_TEST(fill_is_the_same_for_any_threads) {
    const xent_dtype d = cases[_i].dtype;
    const size_t n = cases[_i].count, size = d == XENT_F32 ? 4 : 2;
    unsigned char *one = malloc(n * size), *many = malloc(n * size), *other = malloc(n * size);
    ck_assert(one && many && other);
    tune_fill_logits(one, n, d, 0x5eedull, 1);
    tune_fill_logits(many, n, d, 0x5eedull, cases[_i].threads);
    ck_assert_msg(memcmp(one, many, n * size) == 0, "%zu logits differ between 1 and %d threads", n,
                  cases[_i].threads);
    double sum = 0.0;
    size_t outside = 0, first = 0; /* counted, not asserted a value: an assertion costs a system call */
    for (size_t i = 0; i < n; i++) {
        double v = value(one, d, i);
        if (!(v >= 0.0 && v <= 1.0) && !outside++) first = i;
        sum += v;
    }
    ck_assert_msg(!outside, "%zu logits outside [0, 1], the first at %zu: %g", outside, first, value(one, d, first));
    if (n >= 1000) ck_assert_msg(sum / (double)n > 0.45 && sum / (double)n < 0.55, "mean %g", sum / (double)n);
    tune_fill_logits(other, n, d, 0x5eedull + 1, cases[_i].threads);
    if (n >= 16) ck_assert_msg(memcmp(one, other, n * size) != 0, "another seed gave the same %zu logits", n);
    free(one);
    free(many);
    free(other);
}
END_TEST

int main(void) {
    Suite *s = suite_create("inputs");
    TCase *tc = tcase_create("fill");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, fill_is_the_same_for_any_threads, 0, (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    return run_suite(s);
}
