/*
 * check_reference.c — Check suite of the float64 CPU reference (tune/reference.c).
 *
 * Build and run (from the repository root):
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -Iinclude -I. tests/check_reference.c \
 *       tune/reference.c tune/parallel.c -Wl,-Bstatic -lcheck -lsubunit -Wl,-Bdynamic -lm -lrt -pthread \
 *       -o build/check_reference && build/check_reference
 *
 * Expected values are literals derived by hand (formula in the comment) and
 * checked with Python's math module, e.g.
 *   python3 -c "import math; print(repr(math.log(math.exp(1)+math.exp(2)+math.exp(3))-3))"
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tune/reference.h"
#include "tests/run_suite.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* PyTorch's defaults, filled here: the runtime's xent_problem_init is not linked. */
static xent_problem prob(int64_t n, int64_t c, xent_reduction red) {
    xent_problem p;
    memset(&p, 0, sizeof p);
    p.n = n;
    p.c = c;
    p.row_stride = c;
    p.logits = XENT_F32;
    p.targets = XENT_I64;
    p.reduction = red;
    p.ignore_index = -100;
    p.label_smoothing = 0.0f;
    p.has_weights = 0;
    return p;
}

/* Relative closeness for values computed in double by two routes. */
#define ck_close(a, b, tol)                                                                                            \
    do {                                                                                                               \
        double a_ = (a), b_ = (b);                                                                                     \
        ck_assert_msg(fabs(a_ - b_) <= (tol)*fmax(fabs(b_), 1e-300), "%s = %.17g, expected %.17g", #a, a_, b_);        \
    } while (0)

#define TOL 1e-14

/* Deterministic pseudo-random numbers (no libc rand: same on every host). */
static uint64_t lcg_state;
/* Each test seeds its own stream: with CK_FORK=no tests share the process. */
static void lcg_seed(uint64_t seed) { lcg_state = seed; }
static double lcg_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * (1.0 / 9007199254740992.0);
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Hand values shared by several tests. */
/* row [1,2,3]: lse = log(e^1+e^2+e^3) = 3.4076059644443806; target 2: lse - 3 */
#define LSE_123 3.4076059644443806
#define L_123_T2 0.4076059644443806
/* row [3,1,0]: lse = log(e^3+e^1+e^0) = 3.1698460195562856; target 0: lse - 3 */
#define LSE_310 3.1698460195562856
#define L_310_T0 0.16984601955628564
/* row [0,0,0]: lse = log 3 */
#define LOG3 1.0986122886681098
#define LOG2 0.6931471805599453

static const float ROWS2[6] = {1, 2, 3, 3, 1, 0};

/* ------------------------------------------------------------------------ */
/* Hand-computed cases                                                      */
/* ------------------------------------------------------------------------ */

START_TEST(test_one_row_three_classes) {
    const float x[3] = {1, 2, 3};
    const int64_t t[1] = {2};
    for (int red = 0; red <= 2; red++) {
        xent_problem p = prob(1, 3, (xent_reduction)red);
        double out = -1, lse = -1;
        int64_t bad = -1;
        ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &out, &lse, &bad), XENT_OK);
        /* none, sum and mean of one row are all the row loss */
        ck_close(out, L_123_T2, TOL);
        ck_close(lse, LSE_123, TOL);
        ck_assert_int_eq(bad, 0);
    }
}
END_TEST

START_TEST(test_c1_loss_zero) {
    /* one class: log_softmax is x - x = 0 exactly, lse = x */
    const float x[3] = {-7.5f, 0.0f, 123.25f};
    const int64_t t[3] = {0, 0, 0};
    xent_problem p = prob(3, 1, XENT_REDUCE_NONE);
    double out[3], lse[3];
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, lse, NULL), XENT_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert(out[i] == 0.0);
        ck_assert(lse[i] == (double)x[i]);
    }
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, NULL), XENT_OK);
    ck_assert(out[0] == 0.0);
}
END_TEST

START_TEST(test_c2) {
    /* [2,-1] target 1: log(e^2 + e^-1) + 1 = 3 + log(1 + e^-3) = 3.048587351573742
       [0, 0] target 0: log 2 */
    const float x[4] = {2, -1, 0, 0};
    const int32_t t[2] = {1, 0};
    xent_problem p = prob(2, 2, XENT_REDUCE_NONE);
    p.targets = XENT_I32;
    double out[2];
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 3.048587351573742, TOL);
    ck_close(out[1], LOG2, TOL);
}
END_TEST

START_TEST(test_two_rows_sum_mean) {
    /* rows [1,2,3] t=2 and [3,1,0] t=0:
       sum = 0.4076059644443806 + 0.16984601955628564 = 0.5774519840006662, mean = sum/2 */
    const int64_t t[2] = {2, 0};
    double out[2], lse[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_NONE);
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, lse, NULL), XENT_OK);
    ck_close(out[0], L_123_T2, TOL);
    ck_close(out[1], L_310_T0, TOL);
    ck_close(lse[1], LSE_310, TOL);
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.5774519840006662, TOL);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.2887259920003331, TOL);
}
END_TEST

START_TEST(test_ignore_index_default) {
    /* third row [0,0,0] ignored (-100): loss 0, still lse = log 3; mean over 2 rows */
    const float x[9] = {1, 2, 3, 3, 1, 0, 0, 0, 0};
    const int64_t t[3] = {2, 0, -100};
    double out[3], lse[3];
    int64_t bad = -1;
    xent_problem p = prob(3, 3, XENT_REDUCE_NONE);
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, lse, &bad), XENT_OK);
    ck_close(out[0], L_123_T2, TOL);
    ck_close(out[1], L_310_T0, TOL);
    ck_assert(out[2] == 0.0);
    ck_close(lse[2], LOG3, TOL);
    ck_assert_int_eq(bad, 0);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.2887259920003331, TOL);
}
END_TEST

START_TEST(test_ignore_index_in_range) {
    /* ignore_index = 1 lies inside [0, c): the row with target 1 is ignored, not scored.
       rows [1,2,3] t=2, [3,1,0] t=1 (ignored), [0.5,0.25,-1] t=0:
       l2 = log(e^.5+e^.25+e^-1) - 0.5 = 0.6941121864019144
       mean = (0.4076059644443806 + 0.6941121864019144)/2 = 0.5508590754231475 */
    const float x[9] = {1, 2, 3, 3, 1, 0, 0.5f, 0.25f, -1};
    const int32_t t[3] = {2, 1, 0};
    double out[3];
    xent_problem p = prob(3, 3, XENT_REDUCE_NONE);
    p.targets = XENT_I32;
    p.ignore_index = 1;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, NULL), XENT_OK);
    ck_assert(out[1] == 0.0);
    ck_close(out[2], 0.6941121864019144, TOL);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.5508590754231475, TOL);
}
END_TEST

START_TEST(test_all_ignored) {
    /* PyTorch: mean over zero targets is 0/0 = NaN, sum is 0, none all 0 */
    const int64_t t[2] = {-100, -100};
    double out[2], lse[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_MEAN);
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, lse, NULL), XENT_OK);
    ck_assert(isnan(out[0]));
    ck_close(lse[0], LSE_123, TOL); /* ignored rows still get their lse */
    ck_close(lse[1], LSE_310, TOL);
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_assert(out[0] == 0.0);
    p.reduction = XENT_REDUCE_NONE;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_assert(out[0] == 0.0 && out[1] == 0.0);
    /* with weights too: gather of no weights sums to 0 -> NaN */
    const float w[3] = {0.5f, 2, 1};
    p.reduction = XENT_REDUCE_MEAN;
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_assert(isnan(out[0]));
}
END_TEST

START_TEST(test_weights) {
    /* w = [0.5, 2, 1]; rows [1,2,3] t=2 (w=1), [3,1,0] t=0 (w=0.5):
       none = [1*0.4076059644443806, 0.5*0.16984601955628564]
       sum  = 0.4925289742225234
       mean = sum / (1 + 0.5) = 0.32835264948168225 (divides by sum of w[t], not n) */
    const float w[3] = {0.5f, 2, 1};
    const int64_t t[2] = {2, 0};
    double out[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_NONE);
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_close(out[0], L_123_T2, TOL);
    ck_close(out[1], 0.5 * L_310_T0, TOL);
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.4925289742225234, TOL);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.32835264948168225, TOL);
}
END_TEST

START_TEST(test_smoothing_no_weights) {
    /* eps = 0.25 (exact in float), c = 3:
       row [1,2,3] t=2: nll = 0.4076059644443806, smooth = 3*lse - (1+2+3) = 4.222817893333142
         loss = 0.75*nll + (0.25/3)*smooth = 0.6576059644443806
       row [3,1,0] t=0: nll = 0.16984601955628564, smooth = 3*lse - 4 = 5.509538058668857
         loss = 0.75*nll + (0.25/3)*smooth = 0.5865126862229524
       mean = (0.6576059644443806 + 0.5865126862229524)/2 = 0.6220593253336665 */
    const int64_t t[2] = {2, 0};
    double out[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_NONE);
    p.label_smoothing = 0.25f;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.6576059644443806, TOL);
    ck_close(out[1], 0.5865126862229524, TOL);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.6220593253336665, TOL);
}
END_TEST

START_TEST(test_smoothing_weights) {
    /* eps = 0.25, w = [0.5, 2, 1]; smooth_i = sum_j w_j (lse_i - x_ij):
       row [1,2,3] t=2: nll = 1*0.4076059644443806
         smooth = 0.5*(lse-1) + 2*(lse-2) + 1*(lse-3) = 3.5*lse - 7.5 = 4.426620875555333
         loss = 0.75*nll + (0.25/3)*smooth = 0.6745895462962297
       row [3,1,0] t=0: nll = 0.5*0.16984601955628564
         smooth = 0.5*(lse-3) + 2*(lse-1) + 1*(lse-0) = 3.5*lse - 3.5 = 7.5944610684470
         loss = 0.75*nll + (0.25/3)*smooth = 0.6965640130375237
       mean = (0.6745895462962297 + 0.6965640130375237) / (1 + 0.5) = 0.914102372889169 */
    const float w[3] = {0.5f, 2, 1};
    const int64_t t[2] = {2, 0};
    double out[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_NONE);
    p.label_smoothing = 0.25f;
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.6745895462962297, TOL);
    ck_close(out[1], 0.6965640130375237, TOL);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_close(out[0], 0.914102372889169, TOL);
}
END_TEST

START_TEST(test_smoothing_zero_weight_sum) {
    /* Targets whose weights are all 0 with eps > 0: PyTorch's nll mean is 0/0
       = NaN, so the mean is NaN although the smoothing part alone is finite
       (0.25/3 * smooth / 0 would be +inf); the sum stays finite, as the
       PyTorch cross-check on the GPU shows. */
    const float w[3] = {0, 2, 0};
    const int64_t t[2] = {2, 0};
    double out[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_MEAN);
    p.label_smoothing = 0.25f;
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_assert(isnan(out[0]));
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, w, out, NULL, NULL), XENT_OK);
    ck_assert(isfinite(out[0]) && out[0] > 0);
}
END_TEST

START_TEST(test_smoothing_one) {
    /* eps = 1: only the smoothing term, smooth/c = (3*lse - 6)/3 = lse - 2 = 1.4076059644443806 */
    const float x[3] = {1, 2, 3};
    const int64_t t[1] = {2};
    double out;
    xent_problem p = prob(1, 3, XENT_REDUCE_MEAN);
    p.label_smoothing = 1.0f;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &out, NULL, NULL), XENT_OK);
    ck_close(out, 1.4076059644443806, TOL);
}
END_TEST

/* Fill n x c logits of dtype dt (values in [-4, 4)) and targets with ~1/5 ignored. */
static void fill_random(xent_dtype dt, int64_t n, int64_t c, void *x, int64_t *t) {
    for (int64_t k = 0; k < n * c; k++) {
        float v = (float)(8.0 * lcg_uniform() - 4.0);
        if (dt == XENT_F32)
            ((float *)x)[k] = v;
        else if (dt == XENT_F16)
            ((uint16_t *)x)[k] = xent_float_to_half(v);
        else
            ((uint16_t *)x)[k] = xent_float_to_bf16(v);
    }
    for (int64_t i = 0; i < n; i++) t[i] = lcg_uniform() < 0.2 ? -100 : (int64_t)(lcg_uniform() * (double)c);
}

/* sum == sum of none; mean == sum / sum of w[t] (or count); lse alike. */
static void check_consistency(xent_dtype dt, int use_w, float eps) {
    enum { N = 37, C = 11 };
    static float xbuf[N * C];
    int64_t t[N];
    float w[C];
    double none[N], lse_none[N], lse_sum[N], sum, mean;
    fill_random(dt, N, C, xbuf, t);
    for (int j = 0; j < C; j++) w[j] = (float)(0.25 + 2.0 * lcg_uniform());
    xent_problem p = prob(N, C, XENT_REDUCE_NONE);
    p.logits = dt;
    p.label_smoothing = eps;
    p.has_weights = use_w;
    const float *wp = use_w ? w : NULL;
    ck_assert_int_eq(xent_ref_forward(&p, xbuf, t, wp, none, lse_none, NULL), XENT_OK);
    p.reduction = XENT_REDUCE_SUM;
    ck_assert_int_eq(xent_ref_forward(&p, xbuf, t, wp, &sum, lse_sum, NULL), XENT_OK);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, xbuf, t, wp, &mean, NULL, NULL), XENT_OK);
    double s = 0.0, den = 0.0;
    for (int i = 0; i < N; i++) {
        s += none[i];
        if (t[i] != -100)
            den += use_w ? (double)w[t[i]] : 1.0;
        else
            ck_assert(none[i] == 0.0);
        ck_assert(lse_none[i] == lse_sum[i]);
    }
    ck_assert(den > 0.0);
    ck_close(sum, s, 1e-13);
    ck_close(mean, sum / den, 1e-13);
}

START_TEST(test_reduction_consistency) {
    static const float eps[3] = {0.0f, 0.1f, 1.0f};
    lcg_seed(1);
    for (int dt = 0; dt <= 2; dt++)
        for (int use_w = 0; use_w <= 1; use_w++)
            for (int e = 0; e < 3; e++) check_consistency((xent_dtype)dt, use_w, eps[e]);
}
END_TEST

START_TEST(test_bad_targets) {
    /* rows [1,2,3] t=2 (good), [3,1,0] t=-1 (negative, not ignore_index), [0,0,0] t=3 (== c),
       [0,0,0] t=-100 (ignored, not bad): bad rows give NaN losses, sums and means NaN */
    const float x[12] = {1, 2, 3, 3, 1, 0, 0, 0, 0, 0, 0, 0};
    const int64_t t[4] = {2, -1, 3, -100};
    double out[4], lse[4];
    int64_t bad = -1;
    xent_problem p = prob(4, 3, XENT_REDUCE_NONE);
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, lse, &bad), XENT_OK);
    ck_assert_int_eq(bad, 2);
    ck_close(out[0], L_123_T2, TOL);
    ck_assert(isnan(out[1]) && isnan(out[2]));
    ck_assert(out[3] == 0.0);
    ck_close(lse[1], LSE_310, TOL); /* lse does not depend on the target */
    for (int red = 1; red <= 2; red++) {
        p.reduction = (xent_reduction)red;
        bad = -1;
        ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, out, NULL, &bad), XENT_OK);
        ck_assert(isnan(out[0]));
        ck_assert_int_eq(bad, 2);
    }
    /* with weights, a bad target's weight must not be read (t=3 is past w[2]) */
    const float w[3] = {1, 1, 1};
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, w, out, NULL, &bad), XENT_OK);
    ck_assert(isnan(out[0]));
    ck_assert_int_eq(bad, 2);
    /* int32 targets, huge positive value */
    const int32_t t32[2] = {2, INT32_MAX};
    p = prob(2, 3, XENT_REDUCE_SUM);
    p.targets = XENT_I32;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t32, NULL, out, NULL, &bad), XENT_OK);
    ck_assert(isnan(out[0]));
    ck_assert_int_eq(bad, 1);
}
END_TEST

START_TEST(test_row_stride_padding) {
    /* rows of 3 classes at stride 5; padding holds NaN, +inf and huge values that
       would change every result if read */
    const float nan = NAN, inf = INFINITY;
    const float x[10] = {1, 2, 3, nan, inf, 3, 1, 0, -inf, 1e38f};
    const int64_t t[2] = {2, 0};
    double packed[2], strided[2], lse_p[2], lse_s[2];
    xent_problem p = prob(2, 3, XENT_REDUCE_NONE);
    p.label_smoothing = 0.5f;
    ck_assert_int_eq(xent_ref_forward(&p, ROWS2, t, NULL, packed, lse_p, NULL), XENT_OK);
    p.row_stride = 5;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, strided, lse_s, NULL), XENT_OK);
    for (int i = 0; i < 2; i++) {
        ck_assert(packed[i] == strided[i]);
        ck_assert(lse_p[i] == lse_s[i]);
    }
    ck_close(lse_s[0], LSE_123, TOL);
}
END_TEST

START_TEST(test_half_logits) {
    /* [1,2,3] in fp16 (0x3C00, 0x4000, 0x4200) and bf16 (0x3F80, 0x4000, 0x4040):
       same loss as fp32, all three values are exact */
    const uint16_t h[3] = {0x3C00, 0x4000, 0x4200};
    const uint16_t b[3] = {0x3F80, 0x4000, 0x4040};
    const int64_t t[1] = {2};
    double out, lse;
    xent_problem p = prob(1, 3, XENT_REDUCE_MEAN);
    p.logits = XENT_F16;
    ck_assert_int_eq(xent_ref_forward(&p, h, t, NULL, &out, &lse, NULL), XENT_OK);
    ck_close(out, L_123_T2, TOL);
    ck_close(lse, LSE_123, TOL);
    p.logits = XENT_BF16;
    ck_assert_int_eq(xent_ref_forward(&p, b, t, NULL, &out, &lse, NULL), XENT_OK);
    ck_close(out, L_123_T2, TOL);
    /* 16-bit rows with padding: stride 4, padding a NaN pattern */
    const uint16_t hp[4] = {0x3C00, 0x4000, 0x4200, 0x7E00};
    p.logits = XENT_F16;
    p.row_stride = 4;
    ck_assert_int_eq(xent_ref_forward(&p, hp, t, NULL, &out, NULL, NULL), XENT_OK);
    ck_close(out, L_123_T2, TOL);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Extreme logits                                                           */
/* ------------------------------------------------------------------------ */

static double one_row(const float *x, int64_t c, int64_t t, float eps, const float *w, double *lse) {
    xent_problem p = prob(1, c, XENT_REDUCE_NONE);
    p.label_smoothing = eps;
    p.has_weights = w != NULL;
    const int64_t tt[1] = {t};
    double out = -12345.0;
    ck_assert_int_eq(xent_ref_forward(&p, x, tt, w, &out, lse, NULL), XENT_OK);
    return out;
}

START_TEST(test_extreme_finite) {
    double lse;
    /* [1e30, -1e30, 0]: lse = 1e30f exactly (the other terms vanish); t=0: 0;
       t=1: 1e30f - (-1e30f) = 2.0000000300949324e30 (1e30f = 1.0000000150474662e30) */
    const float a[3] = {1e30f, -1e30f, 0};
    ck_assert(one_row(a, 3, 0, 0, NULL, &lse) == 0.0);
    ck_assert(lse == 1.0000000150474662e30);
    ck_close(one_row(a, 3, 1, 0, NULL, NULL), 2.0000000300949324e30, TOL);
    /* [1e30, 1e30] t=0: log 2, which lse - x would round away at this magnitude */
    const float b[2] = {1e30f, 1e30f};
    ck_close(one_row(b, 2, 0, 0, NULL, NULL), LOG2, TOL);
    /* [-1e30]*3 t=1: log 3 */
    const float c3[3] = {-1e30f, -1e30f, -1e30f};
    ck_close(one_row(c3, 3, 1, 0, NULL, NULL), LOG3, TOL);
    /* [FLT_MAX, -FLT_MAX] t=1: 2*FLT_MAX = 6.805646932770577e38, finite in double */
    const float d[2] = {FLT_MAX, -FLT_MAX};
    ck_close(one_row(d, 2, 1, 0, NULL, NULL), 6.805646932770577e38, TOL);
    /* smoothing at 1e30: eps=0.5, [1e30, -1e30] t=0: nll = 0, smooth = 0 + 2e30f
       loss = 0.5*0 + (0.5/2)*2.0000000300949324e30 = 5.000000075237331e29 */
    const float e[2] = {1e30f, -1e30f};
    ck_close(one_row(e, 2, 0, 0.5f, NULL, NULL), 5.000000075237331e29, TOL);
}
END_TEST

START_TEST(test_extreme_inf) {
    double lse;
    const float inf = INFINITY;
    /* [0, -inf, 0]: lse = log 2; t=0: log 2; t=1: +inf (log_softmax = -inf) */
    const float a[3] = {0, -inf, 0};
    ck_close(one_row(a, 3, 0, 0, NULL, &lse), LOG2, TOL);
    ck_close(lse, LOG2, TOL);
    ck_assert(one_row(a, 3, 1, 0, NULL, NULL) == INFINITY);
    /* smoothing sums -log_softmax over all classes: +inf from the -inf entry */
    ck_assert(one_row(a, 3, 0, 0.25f, NULL, NULL) == INFINITY);
    /* ... unless that class weighs 0: 0 * inf = NaN, as PyTorch's input * weight */
    const float w[3] = {1, 0, 1};
    ck_assert(isnan(one_row(a, 3, 0, 0.25f, w, NULL)));
    /* all -inf: log_softmax is NaN in PyTorch; lse = -inf as torch.logsumexp */
    const float b[2] = {-inf, -inf};
    ck_assert(isnan(one_row(b, 2, 0, 0, NULL, &lse)));
    ck_assert(lse == -INFINITY);
    /* a +inf entry: x - max is NaN, loss NaN for any target; lse = +inf */
    const float c[2] = {inf, 0};
    ck_assert(isnan(one_row(c, 2, 0, 0, NULL, &lse)));
    ck_assert(lse == INFINITY);
    ck_assert(isnan(one_row(c, 2, 1, 0, NULL, NULL)));
    /* NaN anywhere: NaN loss and lse */
    const float d[3] = {0, NAN, 1};
    ck_assert(isnan(one_row(d, 3, 2, 0, NULL, &lse)));
    ck_assert(isnan(lse));
    /* an ignored all -inf row contributes 0: mean of the other row only */
    const float e[6] = {-inf, -inf, -inf, 1, 2, 3};
    const int64_t t[2] = {-100, 2};
    xent_problem p = prob(2, 3, XENT_REDUCE_MEAN);
    double out;
    ck_assert_int_eq(xent_ref_forward(&p, e, t, NULL, &out, NULL, NULL), XENT_OK);
    ck_close(out, L_123_T2, TOL);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Larger problem: the threaded path                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_threaded_deterministic) {
    /* 1200 x 1000 exceeds the one-thread threshold (2^20 elements): chunks are
       spread over threads, and results must be bitwise repeatable */
    enum { N = 1200, C = 1000 };
    float *x = malloc(sizeof(float) * N * C);
    int64_t *t = malloc(sizeof(int64_t) * N);
    double *none = malloc(sizeof(double) * N);
    ck_assert(x && t && none);
    lcg_seed(2);
    fill_random(XENT_F32, N, C, x, t);
    xent_problem p = prob(N, C, XENT_REDUCE_SUM);
    double s1, s2, m;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &s1, NULL, NULL), XENT_OK);
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &s2, NULL, NULL), XENT_OK);
    ck_assert(memcmp(&s1, &s2, sizeof s1) == 0);
    p.reduction = XENT_REDUCE_NONE;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, none, NULL, NULL), XENT_OK);
    p.reduction = XENT_REDUCE_MEAN;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &m, NULL, NULL), XENT_OK);
    double s = 0.0;
    int64_t cnt = 0;
    for (int i = 0; i < N; i++) {
        s += none[i];
        cnt += t[i] != -100;
    }
    ck_close(s1, s, 1e-12);
    ck_close(m, s1 / (double)cnt, 1e-15);
    /* uniform logits in [-4,4) over 1000 classes: E[loss] = log(1000 (e^4 - e^-4) / 8)
       - E[x_t] = 8.827; the mean of ~960 rows has a standard deviation near 0.075 */
    ck_assert_msg(m > 8.4 && m < 9.3, "mean %g", m);
    free(x);
    free(t);
    free(none);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Argument validation                                                      */
/* ------------------------------------------------------------------------ */

START_TEST(test_args) {
    const float x[3] = {1, 2, 3};
    const float w[3] = {1, 1, 1};
    const int64_t t[1] = {2};
    double out = 42.0;
    xent_problem p = prob(1, 3, XENT_REDUCE_MEAN);
    ck_assert_int_eq(xent_ref_forward(NULL, x, t, NULL, &out, NULL, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_ref_forward(&p, NULL, t, NULL, &out, NULL, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_ref_forward(&p, x, NULL, NULL, &out, NULL, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, NULL, NULL, NULL), XENT_EINVAL);
    /* weights must match has_weights, both ways */
    ck_assert_int_eq(xent_ref_forward(&p, x, t, w, &out, NULL, NULL), XENT_EINVAL);
    p.has_weights = 1;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &out, NULL, NULL), XENT_EINVAL);

    struct {
        const char *what;
        xent_problem p;
    } bad[12];
    int nb = 0;
    for (int k = 0; k < 12; k++) bad[k].p = prob(1, 3, XENT_REDUCE_MEAN);
    bad[nb].what = "n = 0";
    bad[nb++].p.n = 0;
    bad[nb].what = "n < 0";
    bad[nb++].p.n = -5;
    bad[nb].what = "c = 0";
    bad[nb].p.c = 0;
    bad[nb++].p.row_stride = 0;
    bad[nb].what = "row_stride < c";
    bad[nb++].p.row_stride = 2;
    bad[nb].what = "n * stride overflows";
    bad[nb++].p.n = INT64_MAX / 2;
    bad[nb].what = "smoothing < 0";
    bad[nb++].p.label_smoothing = -0.1f;
    bad[nb].what = "smoothing > 1";
    bad[nb++].p.label_smoothing = 1.5f;
    bad[nb].what = "smoothing NaN";
    bad[nb++].p.label_smoothing = NAN;
    bad[nb].what = "logits dtype";
    bad[nb++].p.logits = (xent_dtype)7;
    bad[nb].what = "targets dtype";
    bad[nb++].p.targets = (xent_index)-1;
    bad[nb].what = "reduction";
    bad[nb++].p.reduction = (xent_reduction)3;
    for (int k = 0; k < nb; k++) {
        out = 42.0;
        int rc = xent_ref_forward(&bad[k].p, x, t, NULL, &out, NULL, NULL);
        ck_assert_msg(rc == XENT_EINVAL, "%s: rc %d", bad[k].what, rc);
        ck_assert_msg(out == 42.0, "%s: output written", bad[k].what);
    }
    /* the edges of the valid range pass */
    p = prob(1, 3, XENT_REDUCE_MEAN);
    p.label_smoothing = 0.0f;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &out, NULL, NULL), XENT_OK);
    p.label_smoothing = 1.0f;
    ck_assert_int_eq(xent_ref_forward(&p, x, t, NULL, &out, NULL, NULL), XENT_OK);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fp16 / bf16 conversions                                                  */
/* ------------------------------------------------------------------------ */

START_TEST(test_half_known) {
    ck_assert_uint_eq(xent_float_to_half(1.0f), 0x3C00);
    ck_assert_uint_eq(xent_float_to_half(-2.0f), 0xC000);
    ck_assert_uint_eq(xent_float_to_half(0.0f), 0x0000);
    ck_assert_uint_eq(xent_float_to_half(-0.0f), 0x8000);
    ck_assert_uint_eq(xent_float_to_half(65504.0f), 0x7BFF); /* largest half */
    ck_assert_uint_eq(xent_float_to_half(0.1f), 0x2E66);     /* 1.6*2^-4: mantissa 614.4 -> 614 */
    ck_assert_uint_eq(xent_float_to_half(0x1p-14f), 0x0400); /* smallest normal */
    ck_assert(xent_half_to_float(0x3C00) == 1.0f);
    ck_assert(xent_half_to_float(0xC000) == -2.0f);
    ck_assert(xent_half_to_float(0x7BFF) == 65504.0f);
    ck_assert(xent_half_to_float(0x0400) == 0x1p-14f);
    ck_assert(xent_half_to_float(0x3555) == 0x1.554p-2f); /* 0.333251953125 */
    ck_assert(f32_bits(xent_half_to_float(0x8000)) == 0x80000000u);
}
END_TEST

START_TEST(test_half_subnormal) {
    /* subnormal halves are k * 2^-24 */
    ck_assert(xent_half_to_float(0x0001) == 0x1p-24f); /* 5.960464477539063e-08 */
    ck_assert(xent_half_to_float(0x03FF) == 1023 * 0x1p-24f);
    ck_assert(xent_half_to_float(0x8001) == -0x1p-24f);
    ck_assert_uint_eq(xent_float_to_half(0x1p-24f), 0x0001);
    ck_assert_uint_eq(xent_float_to_half(1023 * 0x1p-24f), 0x03FF);
    ck_assert_uint_eq(xent_float_to_half(-3 * 0x1p-24f), 0x8003);
    /* 2^-25 is half of the smallest subnormal: a tie, to even 0 */
    ck_assert_uint_eq(xent_float_to_half(0x1p-25f), 0x0000);
    ck_assert_uint_eq(xent_float_to_half(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    ck_assert_uint_eq(xent_float_to_half(0x1p-30f), 0x0000);
    ck_assert_uint_eq(xent_float_to_half(FLT_MIN), 0x0000);
    ck_assert_uint_eq(xent_float_to_half(bits_f32(1)), 0x0000); /* float subnormal */
    /* 3 * 2^-25 = 1.5 units: tie between 1 and 2, to even 2 */
    ck_assert_uint_eq(xent_float_to_half(3 * 0x1p-25f), 0x0002);
    /* 5 * 2^-25 = 2.5 units: tie between 2 and 3, to even 2 */
    ck_assert_uint_eq(xent_float_to_half(5 * 0x1p-25f), 0x0002);
    /* 1023.5 units rounds (to even) up into the smallest normal 0x0400 */
    ck_assert_uint_eq(xent_float_to_half(2047 * 0x1p-25f), 0x0400);
}
END_TEST

START_TEST(test_half_rounding) {
    /* half has 10 mantissa bits: ulp(1) = 2^-10 */
    ck_assert_uint_eq(xent_float_to_half(1.0f + 0x1p-11f), 0x3C00);            /* tie, to even 0x3C00 */
    ck_assert_uint_eq(xent_float_to_half(1.0f + 3 * 0x1p-11f), 0x3C02);        /* tie, to even 0x3C02 */
    ck_assert_uint_eq(xent_float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); /* above the tie */
    ck_assert_uint_eq(xent_float_to_half(1.0f + 0x1p-11f - 0x1p-20f), 0x3C00); /* below the tie */
    /* 2 - 2^-12 rounds up across the exponent boundary to 2.0 */
    ck_assert_uint_eq(xent_float_to_half(2.0f - 0x1p-12f), 0x4000);
    /* overflow: 65519 rounds down to 65504; 65520 is the tie to 65536 -> inf */
    ck_assert_uint_eq(xent_float_to_half(65519.0f), 0x7BFF);
    ck_assert_uint_eq(xent_float_to_half(65520.0f), 0x7C00);
    ck_assert_uint_eq(xent_float_to_half(-1e10f), 0xFC00);
    ck_assert_uint_eq(xent_float_to_half(FLT_MAX), 0x7C00);
}
END_TEST

START_TEST(test_half_special) {
    ck_assert_uint_eq(xent_float_to_half(INFINITY), 0x7C00);
    ck_assert_uint_eq(xent_float_to_half(-INFINITY), 0xFC00);
    ck_assert(xent_half_to_float(0x7C00) == INFINITY);
    ck_assert(xent_half_to_float(0xFC00) == -INFINITY);
    ck_assert(isnan(xent_half_to_float(0x7E00)));
    ck_assert(isnan(xent_half_to_float(0x7C01))); /* signalling pattern is NaN too */
    ck_assert(isnan(xent_half_to_float(0xFE00)));
    /* NaN stays NaN, also a float NaN whose payload sits only in the low bits */
    const uint32_t nans[4] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu};
    for (int k = 0; k < 4; k++) {
        uint16_t h = xent_float_to_half(bits_f32(nans[k]));
        ck_assert_msg((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0, "nan %08x -> %04x", nans[k], h);
        ck_assert_uint_eq(h & 0x8000, (nans[k] >> 16) & 0x8000);
    }
}
END_TEST

START_TEST(test_half_roundtrip_all) {
    /* every non-NaN half survives half -> float -> half */
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = xent_half_to_float((uint16_t)h);
        if (isnan(f)) {
            ck_assert((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
            continue;
        }
        ck_assert_msg(xent_float_to_half(f) == h, "half %04x", h);
    }
}
END_TEST

#ifdef __FLT16_MAX__
START_TEST(test_half_vs_compiler) {
    /* the compiler's _Float16 conversion rounds to nearest even too: compare on
       a sweep of float bit patterns (stride prime, so all exponents and low bits vary) */
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65521) {
        float f = bits_f32((uint32_t)u);
        if (isnan(f)) continue;
        _Float16 g = (_Float16)f;
        uint16_t want;
        memcpy(&want, &g, sizeof want);
        ck_assert_msg(xent_float_to_half(f) == want, "float %08x: %04x vs %04x", (unsigned)u, xent_float_to_half(f),
                      want);
        ck_assert(f32_bits(xent_half_to_float(want)) == f32_bits((float)g));
    }
}
END_TEST
#endif

START_TEST(test_bf16) {
    ck_assert_uint_eq(xent_float_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(xent_float_to_bf16(-2.0f), 0xC000);
    ck_assert_uint_eq(xent_float_to_bf16(3.140625f), 0x4049);
    ck_assert(xent_bf16_to_float(0x3F80) == 1.0f);
    ck_assert(xent_bf16_to_float(0x4049) == 3.140625f);
    /* ties to even on the low 16 bits */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x3F808000u)), 0x3F80); /* tie, even stays */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x3F818000u)), 0x3F82); /* tie, odd rounds up */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x3F808001u)), 0x3F81); /* above the tie */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x3F807FFFu)), 0x3F80); /* below the tie */
    /* subnormals */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x00000001u)), 0x0000);
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x00008000u)), 0x0000); /* tie to even 0 */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x00018000u)), 0x0002); /* tie to even 2 */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x00010000u)), 0x0001);
    ck_assert(xent_bf16_to_float(0x0001) == bits_f32(0x00010000u));
    /* overflow: FLT_MAX rounds up into inf; just below stays finite */
    ck_assert_uint_eq(xent_float_to_bf16(FLT_MAX), 0x7F80);
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x7F7F7FFFu)), 0x7F7F);
    ck_assert_uint_eq(xent_float_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(xent_float_to_bf16(-INFINITY), 0xFF80);
    ck_assert(xent_bf16_to_float(0xFF80) == -INFINITY);
    /* NaN stays NaN (not inf), sign kept, even with a low-bits-only payload */
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0x7F800001u)), 0x7FC0);
    ck_assert_uint_eq(xent_float_to_bf16(bits_f32(0xFFC00000u)), 0xFFC0);
    ck_assert(isnan(xent_bf16_to_float(0x7FC0)));
    ck_assert(isnan(xent_bf16_to_float(0x7F81)));
    /* every non-NaN bf16 survives bf16 -> float -> bf16 */
    for (uint32_t b = 0; b <= 0xFFFF; b++) {
        float f = xent_bf16_to_float((uint16_t)b);
        if (!isnan(f)) ck_assert_msg(xent_float_to_bf16(f) == b, "bf16 %04x", b);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Relative errors                                                          */
/* ------------------------------------------------------------------------ */

START_TEST(test_rel_err) {
    ck_assert(xent_rel_err(1.0, 1.0) == 0.0);
    ck_close(xent_rel_err(1.1, 1.0), 0.1, 1e-12);
    ck_close(xent_rel_err(-0.9, -1.0), 0.1, 1e-12);
    ck_assert(xent_rel_err(NAN, NAN) == 0.0);
    ck_assert(xent_rel_err(NAN, 1.0) == INFINITY);
    ck_assert(xent_rel_err(1.0, NAN) == INFINITY);
    ck_assert(xent_rel_err(INFINITY, INFINITY) == 0.0);
    ck_assert(xent_rel_err(-INFINITY, INFINITY) == INFINITY);
    ck_assert(xent_rel_err(INFINITY, 1.0) == INFINITY);
    ck_assert(xent_rel_err(1.0, INFINITY) == INFINITY);
    ck_assert(xent_rel_err(0.0, 0.0) == 0.0);
    ck_assert(xent_rel_err(-0.0, 0.0) == 0.0);
    /* below FLT_MIN the denominator is floored: 1e-40 / 1.1754943508222875e-38 */
    ck_close(xent_rel_err(1e-40, 0.0), 0.008507059173023462, 1e-12);
}
END_TEST

START_TEST(test_rel_err_vec) {
    const float a1[4] = {1, 2, NAN, INFINITY};
    const double b1[4] = {1, 2, NAN, INFINITY};
    ck_assert(xent_rel_err_vec(a1, b1, 4) == 0.0);
    /* ||(0, -0.5)|| / ||(1, 2.5)|| = 0.5 / sqrt(7.25) = 0.18569533817705186 */
    const float a2[2] = {1, 2};
    const double b2[2] = {1, 2.5};
    ck_close(xent_rel_err_vec(a2, b2, 2), 0.18569533817705186, 1e-12);
    const double b3[2] = {1, NAN};
    ck_assert(xent_rel_err_vec(a2, b3, 2) == INFINITY);
    const double b4[2] = {1, -INFINITY};
    ck_assert(xent_rel_err_vec(a1 + 2, b4, 2) == INFINITY); /* NaN vs 1, inf vs -inf */
    ck_assert(xent_rel_err_vec(a2, b2, 0) == 0.0);
    ck_assert(isnan(xent_rel_err_vec(NULL, b2, 2)));
    ck_assert(isnan(xent_rel_err_vec(a2, NULL, 2)));
    /* all-zero reference and result match */
    const float z[2] = {0, 0};
    const double zd[2] = {0, 0};
    ck_assert(xent_rel_err_vec(z, zd, 2) == 0.0);
}
END_TEST

/* The accumulator is the vector error's one rule: pair by pair, it gives
 * what xent_rel_err_vec gives for the same pairs. */
START_TEST(test_err_acc) {
    static const struct {
        float a[3];
        double b[3];
    } rows[] = {
        {{1, 2, 3}, {1, 2, 3}},
        {{1, 2, 0}, {1, 2.5, 0}},
        {{NAN, INFINITY, 1}, {NAN, INFINITY, 1.5}},
        {{1, NAN, 1}, {1, 2, 1}},
        {{INFINITY, 1, 1}, {-INFINITY, 1, 1}},
        {{0, 0, 0}, {0, 0, 0}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        xent_err_acc acc = {0};
        for (int i = 0; i < 3; i++) xent_err_acc_add(&acc, rows[r].a[i], rows[r].b[i]);
        double want = xent_rel_err_vec(rows[r].a, rows[r].b, 3), got = xent_err_acc_value(&acc);
        ck_assert_msg(got == want, "row %zu: accumulator %g, vector %g", r, got, want);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *reference_suite(void) {
    Suite *s = suite_create("reference");
    TCase *tc = tcase_create("hand");
    tcase_add_test(tc, test_one_row_three_classes);
    tcase_add_test(tc, test_c1_loss_zero);
    tcase_add_test(tc, test_c2);
    tcase_add_test(tc, test_two_rows_sum_mean);
    tcase_add_test(tc, test_ignore_index_default);
    tcase_add_test(tc, test_ignore_index_in_range);
    tcase_add_test(tc, test_all_ignored);
    tcase_add_test(tc, test_weights);
    tcase_add_test(tc, test_smoothing_no_weights);
    tcase_add_test(tc, test_smoothing_weights);
    tcase_add_test(tc, test_smoothing_zero_weight_sum);
    tcase_add_test(tc, test_smoothing_one);
    tcase_add_test(tc, test_reduction_consistency);
    tcase_add_test(tc, test_bad_targets);
    tcase_add_test(tc, test_row_stride_padding);
    tcase_add_test(tc, test_half_logits);
    suite_add_tcase(s, tc);

    tc = tcase_create("extreme");
    tcase_add_test(tc, test_extreme_finite);
    tcase_add_test(tc, test_extreme_inf);
    suite_add_tcase(s, tc);

    tc = tcase_create("large");
    tcase_set_timeout(tc, 120); /* slow under valgrind */
    tcase_add_test(tc, test_threaded_deterministic);
    suite_add_tcase(s, tc);

    tc = tcase_create("args");
    tcase_add_test(tc, test_args);
    suite_add_tcase(s, tc);

    tc = tcase_create("convert");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_half_known);
    tcase_add_test(tc, test_half_subnormal);
    tcase_add_test(tc, test_half_rounding);
    tcase_add_test(tc, test_half_special);
    tcase_add_test(tc, test_half_roundtrip_all);
#ifdef __FLT16_MAX__
    tcase_add_test(tc, test_half_vs_compiler);
#endif
    tcase_add_test(tc, test_bf16);
    suite_add_tcase(s, tc);

    tc = tcase_create("relerr");
    tcase_add_test(tc, test_rel_err);
    tcase_add_test(tc, test_rel_err_vec);
    tcase_add_test(tc, test_err_acc);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(reference_suite()); }
