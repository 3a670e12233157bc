/*
 * reference.h — the float64 CPU reference of xent's forward, used by the
 * tuner to validate candidate kernels and by the GPU test suite.
 *
 * It computes torch.nn.functional.cross_entropy with class-index targets
 * exactly as PyTorch defines it (aten/src/ATen/native/LossNLL.cpp:
 * cross_entropy_loss_label_smoothing and nll_loss), but in double:
 *
 *   lse_i    = max_i + log(sum_j exp(x_ij - max_i))
 *   nll_i    = w[t_i] * (lse_i - x_it)                (w = 1 without weights)
 *   smooth_i = sum_j w_j * (lse_i - x_ij)             (only when eps > 0)
 *   loss_i   = (1 - eps) * nll_i + (eps / c) * smooth_i,   0 for ignored rows
 *   sum      = sum_i loss_i
 *   mean     = sum / sum_{non-ignored i} w[t_i]       (0/0 = NaN when all ignored)
 *
 * Each lse_i - x_ij is evaluated as log(s_i) - (x_ij - max_i), the form of
 * PyTorch's log_softmax, so that losses stay accurate for |logits| ~ 1e30.
 *
 * Not a hot path, but fast enough for 32768 x 4096: rows are split into fixed
 * chunks spread over the CPU's cores, and chunk partial sums are added in chunk
 * order, so results are bitwise deterministic whatever the thread count
 * (up to 32 threads, one core each). Reentrant: no global state.
 */
#ifndef XENT_REFERENCE_H
#define XENT_REFERENCE_H

#include <stdint.h>
#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * float64 reference of F.cross_entropy with class-index targets.
 *
 * logits:  host, n rows of p->row_stride elements of p->logits (fp32, or
 *          fp16/bf16 given as uint16_t bits); elements c..row_stride-1 of a
 *          row are padding and never read.
 * targets: host, n int32_t or int64_t per p->targets.
 * weights: host, c floats when p->has_weights, else must be NULL.
 * out:     1 double (sum, mean) or n doubles (none).
 * lse:     n doubles or NULL (p->write_lse is not consulted). Every row gets
 *          its log-sum-exp, ignored rows included, with torch.logsumexp's
 *          conventions: -inf for a row of only -inf, +inf for a row holding
 *          +inf, NaN for a row holding NaN.
 * bad_rows (may be NULL): the number of rows whose target is outside [0, c)
 *          and not ignore_index. PyTorch raises for those; here such a row's
 *          loss is NaN (so a sum or mean is NaN) and its weight is not read.
 *
 * Edge cases follow PyTorch's arithmetic: a non-ignored row of only -inf, or
 * one holding +inf, has a NaN loss (log_softmax is NaN there); a -inf target
 * logit gives +inf; with eps > 0 any -inf logit gives +inf (0 * inf = NaN
 * where that class's weight is 0). label_smoothing is the problem's float
 * widened to double (0.1f, not 0.1: a 1.5e-8 relative difference at most).
 *
 * Returns XENT_OK, XENT_EINVAL (NULL logits/targets/out, n < 1, c < 1,
 * row_stride < c, n * row_stride overflowing, unknown enum, smoothing outside
 * [0, 1] or NaN, weights given or missing against has_weights) or
 * XENT_ENOMEM (scratch of threads x c doubles could not be allocated).
 */
int xent_ref_forward(const xent_problem *p, const void *logits, const void *targets, const float *weights, double *out,
                     double *lse, int64_t *bad_rows);

/**
 * float64 reference of the training ops, on the whole vocabulary: the loss
 * with p->z_loss and p->softcap (p->op, vocab and class_offset are not
 * consulted), each row's lse (may be NULL) and, when grad is non-NULL, the
 * gradient with respect to the logits of rows 0, grad_step, 2 grad_step, ...
 * (c doubles each, packed; grad_step 1: all n rows), scaled by
 * dloss (NULL: 1; one value for sum and mean, n for none) and, for a mean,
 * divided by the weight sum of the non-ignored rows. Ignored rows give 0; a
 * target outside [0, c) gives NaN. Returns XENT_OK, XENT_EINVAL or XENT_ENOMEM.
 */
int xent_ref_train(const xent_problem *p, const void *logits, const void *targets, const float *weights,
                   const float *dloss, double *loss, double *lse, double *grad, int64_t grad_step);

/** IEEE binary16 bits to float; exact (every half is a float). */
float xent_half_to_float(uint16_t h);
/** float to binary16 bits, round to nearest even; overflow gives inf; NaN stays (quiet) NaN. */
uint16_t xent_float_to_half(float f);
/** bfloat16 bits to float; exact. */
float xent_bf16_to_float(uint16_t b);
/** float to bfloat16 bits, round to nearest even; overflow gives inf; NaN stays (quiet) NaN. */
uint16_t xent_float_to_bf16(float f);
/** Element k of x, an array of dtype d, as a double (exact: every value of the three is one). */
double xent_ref_elem(const void *x, xent_dtype d, int64_t k);
/** v as an output of dtype d holds it: rounded to float, then to d, as a kernel stores its fp32
 *  result. A gradient is compared with its reference rounded so: an f16 mean over many rows
 *  puts most of a row's gradient under f16's subnormal steps (2^-24), which no kernel can keep. */
double xent_ref_round(xent_dtype d, double v);

/**
 * Denominator floor of the relative errors: below fp32's smallest normal,
 * differences between outputs (fp32 on the GPU) are judged absolutely.
 */
#define XENT_REL_ERR_TINY 1.1754943508222875e-38 /* FLT_MIN */

/**
 * Relative error |a - b| / max(|b|, XENT_REL_ERR_TINY) of a result a against
 * a reference b. 0 when both are NaN or a == b (equal infinities included);
 * +INF when exactly one is NaN or one is infinite and the other is not.
 */
double xent_rel_err(double a, double b);

/**
 * Norm-wise relative error ||a - b||_2 / max(||b||_2, XENT_REL_ERR_TINY) of n
 * results a against n references b. Positions where both are NaN, or both the
 * same infinity, match and are left out of both norms; any other position
 * with a non-finite value on one side gives +INF. 0 when n <= 0; NaN when a
 * or b is NULL with n > 0 (so that `err <= tol` fails). Sums of squares are
 * plain doubles: meant for values below 1e150 in magnitude.
 */
double xent_rel_err_vec(const float *a, const double *b, int64_t n);

/**
 * xent_rel_err_vec's error gathered one pair at a time, for results that are
 * not one float array (strided rows, 16-bit values): zero-initialize, add
 * each (result, reference) pair, then read the value.
 */
typedef struct xent_err_acc {
    double d2, b2; /* the squared norms of the differences and of the references */
    int bad;       /* a non-finite value on one side only was seen */
} xent_err_acc;

void xent_err_acc_add(xent_err_acc *acc, double a, double b);
double xent_err_acc_value(const xent_err_acc *acc);

#ifdef __cplusplus
}
#endif

#endif /* XENT_REFERENCE_H */
