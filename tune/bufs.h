/* tune/bufs — inputs, reference and outputs of a tuning run. */
#ifndef XENT_TUNE_BUFS_H
#define XENT_TUNE_BUFS_H

#include "runtime/runtime.h"

typedef struct tune_bufs {
    void *host_logits, *host_targets;
    float *host_weights, *host_out;
    double *ref; /* float64 reference, out_count values */
    size_t logits_bytes, targets_bytes, out_count;
    int ncopies; /* rotated device copies of logits and targets */
    CUdeviceptr logits[64], targets[64];
    CUdeviceptr weights, loss, lse;
    /* the xent_grad family: the gradient (one buffer), dloss = 1, and for a
     * backward the reference's lse as its input */
    xent_op op;
    CUdeviceptr grad, dloss, lse_in;
    double *ref_grad; /* rows 0, grad_step, ... of the float64 gradient */
    int64_t grad_step, n, c, row_stride;
    xent_dtype dtype;
    void *host_grad;
} tune_bufs;

int tune_bufs_create(xent_context *ctx, const xent_problem *p, uint64_t seed, tune_bufs *b);
/* count logits of dtype, uniform in [0, 1), from seed: the same values for
 * any number of threads (threads < 1: the online CPUs). */
void tune_fill_logits(void *x, size_t count, xent_dtype dtype, uint64_t seed, int threads);
void tune_bufs_destroy(xent_context *ctx, tune_bufs *b);
/* Arguments of a launch on copy `copy`. */
void tune_bufs_args(const tune_bufs *b, int copy, xent_args *a);
/* The gradient into host_grad: at least the rows tune_bufs_grad_error compares. */
CUresult tune_bufs_read_grad(const xent_driver *d, tune_bufs *b);
/* Error of host_out against ref (INFINITY when NaN disagrees). */
double tune_bufs_error(const tune_bufs *b);
/* Norm-wise error of host_grad (the device gradient read back) against
 * ref_grad over the sampled rows; 0 when the op writes no gradient. */
double tune_bufs_grad_error(const tune_bufs *b);
/* What a gradient in this dtype, written by op, can promise against the reference rounded to
 * the dtype: its own rounding, once or (XENT_OP_RESCALE) twice. */
double tune_grad_tolerance(xent_dtype d, xent_op op);

#endif
