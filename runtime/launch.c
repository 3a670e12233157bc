/* runtime/launch.c — the hot path: check pointers, launch. No allocation,
 * no lookup beyond the memo, no compile. */
#include "runtime/runtime.h"

static int misaligned_out(const xent_args *a) {
    return (uintptr_t)a->loss % 4 || (uintptr_t)a->lse % 4 || (uintptr_t)a->weights % 4;
}

static int check_args(xent_plan *plan, const xent_args *a) {
    const xent_problem *p = &plan->problem;
    xent_context *ctx = plan->ctx;
    if (!a || !a->logits || !a->targets || !a->loss)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: logits, targets and loss must be device pointers");
    if (!p->has_weights != !a->weights)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: weights must be given exactly when has_weights is set");
    if (!p->write_lse != !a->lse)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: lse must be given exactly when write_lse is set");
    if ((uintptr_t)a->logits % (p->logits == XENT_F32 ? 4 : 2))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: logits are not aligned to their element size");
    if ((uintptr_t)a->targets % (p->targets == XENT_I64 ? 8 : 4))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: targets are not aligned to their element size");
    if ((uintptr_t)a->workspace % 16) return xent_fail(ctx, XENT_EINVAL, "xent_args: workspace is not 16-byte aligned");
    if (misaligned_out(a))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: loss, lse and weights must be 4-byte aligned");
    return XENT_OK;
}

/* The xent_grad kernels' one argument, field for field. */
typedef struct grad_kargs {
    const void *logits, *targets;
    const float *weights;
    float *loss, *lse;
    void *grad;
    const float *dloss;
    float *stats;
    CUdeviceptr ws, err;
    long long n, stride, ignore_index, c0;
    int c, vocab;
    float smoothing, z_loss, softcap;
    int shards;
} grad_kargs;

static int misaligned(const void *ptr, size_t to) { return (uintptr_t)ptr % to != 0; }

/* What each op reads and writes, beyond the forward's check. */
static int check_grad_args(xent_plan *plan, const xent_args *a) {
    const xent_problem *p = &plan->problem;
    xent_context *ctx = plan->ctx;
    const int op = p->op, shard = p->vocab != 0;
    const int needs_grad = op == XENT_OP_FUSED || op == XENT_OP_BACKWARD || op == XENT_OP_RESCALE;
    if (!a) return xent_fail(ctx, XENT_EINVAL, "xent_args: NULL");
    if (op != XENT_OP_COMBINE && op != XENT_OP_RESCALE && (!a->logits || !a->targets))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: logits and targets must be device pointers");
    if (op == XENT_OP_COMBINE && (!a->targets || !a->stats || !a->loss))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: XENT_OP_COMBINE takes targets, stats and loss");
    if (needs_grad && !a->grad) return xent_fail(ctx, XENT_EINVAL, "xent_args: this op writes grad: give it");
    if ((op == XENT_OP_BACKWARD || op == XENT_OP_RESCALE) && !a->dloss)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: this op takes dloss, the loss's upstream gradient");
    if (op == XENT_OP_BACKWARD && !a->lse)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: XENT_OP_BACKWARD reads each row's lse: give it");
    if (op == XENT_OP_FORWARD && shard && !a->stats)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: a shard's forward writes stats: give 2n floats");
    if ((op == XENT_OP_FUSED || (op == XENT_OP_FORWARD && !shard)) && !a->loss)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: loss must be a device pointer");
    if (op != XENT_OP_BACKWARD && !p->write_lse && a->lse)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: lse must be given exactly when write_lse is set");
    if (op != XENT_OP_BACKWARD && op != XENT_OP_RESCALE && p->write_lse && !a->lse)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: lse must be given exactly when write_lse is set");
    if (!p->has_weights != !a->weights)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: weights must be given exactly when has_weights is set");
    size_t esize = p->logits == XENT_F32 ? 4 : 2;
    if (misaligned(a->logits, esize) || misaligned(a->grad, esize))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: logits and grad must be aligned to their element size");
    if (a->grad && a->logits && ((uintptr_t)a->grad - (uintptr_t)a->logits) % 16)
        return xent_fail(ctx, XENT_EINVAL,
                         "xent_args: grad must lie at the logits' 16-byte phase "
                         "(same offset from a 16-byte boundary)");
    if (misaligned(a->targets, p->targets == XENT_I64 ? 8 : 4))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: targets are not aligned to their element size");
    if (misaligned(a->loss, 4) || misaligned(a->lse, 4) || misaligned(a->weights, 4) || misaligned(a->dloss, 4) ||
        misaligned(a->stats, 4))
        return xent_fail(ctx, XENT_EINVAL, "xent_args: loss, lse, weights, dloss and stats must be 4-byte aligned");
    if (misaligned(a->workspace, 16)) return xent_fail(ctx, XENT_EINVAL, "xent_args: workspace is not 16-byte aligned");
    return XENT_OK;
}

/* The second kernel of a plan of two (the training rows after the weight
 * sums, xent_fwd_finish after the forward rows): a programmatic dependent of
 * the first where the plan says the driver and GPU have the launch
 * (plan->dependent), so that it starts before the first ends; else after it
 * on the stream. A failure is reported under the call that made it. */
static int launch_second(const xent_plan *plan, CUfunction fn, unsigned grid, unsigned block, unsigned smem,
                         CUstream stream, void **params) {
    const xent_driver *d = plan->ctx->drv;
    CUresult r;
    if (!plan->dependent) {
        r = d->LaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, stream, params, NULL);
        return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(plan->ctx, "cuLaunchKernel", r);
    }
    CUlaunchAttribute early = {0};
    early.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    early.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg = {grid, 1, 1, block, 1, 1, smem, stream, &early, 1};
    r = d->LaunchKernelEx(&cfg, fn, params, NULL);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(plan->ctx, "cuLaunchKernelEx", r);
}

static int launch_grad(xent_plan *plan, CUstream stream, const xent_args *a, CUdeviceptr ws) {
    const xent_problem *p = &plan->problem;
    xent_context *ctx = plan->ctx;
    grad_kargs k = {a->logits,
                    a->targets,
                    a->weights,
                    a->loss,
                    a->lse,
                    a->grad,
                    a->dloss,
                    a->stats,
                    ws,
                    ctx->err_flag,
                    p->n,
                    p->row_stride,
                    p->ignore_index,
                    p->class_offset,
                    (int)p->c,
                    (int)(p->vocab ? p->vocab : p->c),
                    p->label_smoothing,
                    p->z_loss,
                    p->softcap,
                    p->shards};
    void *params[] = {&k};
    CUresult r = CUDA_SUCCESS;
    if (plan->fn_denom)
        r = ctx->drv->LaunchKernel(plan->fn_denom, plan->denom_grid, 1, 1, 256, 1, 1, 0, stream, params, NULL);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuLaunchKernel", r);
    return launch_second(plan, plan->fn, plan->grid, plan->block, plan->smem, stream, params);
}

/* Threads of xent_fwd_finish's one block (at most its launch bound, 1024). */
#define FINISH_THREADS 1024

/* xent_fwd_finish, one block after the rows' grid, resident before it ends
 * where it is their programmatic dependent. */
static int launch_finish(xent_plan *plan, CUstream stream, float *loss, CUdeviceptr ws) {
    long long nparts = plan->grid;
    void *params[] = {&loss, &ws, &nparts};
    return launch_second(plan, plan->fn_finish, 1, FINISH_THREADS, 0, stream, params);
}

int xent_plan_launch(xent_plan *plan, void *stream, const xent_args *a) {
    if (!plan) return XENT_EINVAL;
    const int grad = plan->family == XENT_FAMILY_GRAD;
    int rc = grad ? check_grad_args(plan, a) : check_args(plan, a);
    if (rc) return rc;
    if (grad) {
        int pushed;
        if ((rc = xent_ctx_enter(plan->ctx, &pushed))) return rc;
        rc = launch_grad(plan, (CUstream)stream, a, a->workspace ? (CUdeviceptr)a->workspace : plan->workspace);
        xent_ctx_leave(plan->ctx, pushed);
        return rc;
    }
    xent_context *ctx = plan->ctx;
    const xent_problem *p = &plan->problem;
    CUdeviceptr ws = a->workspace ? (CUdeviceptr)a->workspace : plan->workspace;
    long long n = p->n, stride = p->row_stride, ignore = p->ignore_index;
    int c = (int)p->c, split = plan->config.split;
    float smoothing = p->label_smoothing;
    void *params[] = {(void *)&a->logits,
                      (void *)&a->targets,
                      (void *)&a->weights,
                      (void *)&a->loss,
                      (void *)&a->lse,
                      &ws,
                      &ctx->err_flag,
                      &n,
                      &c,
                      &stride,
                      &ignore,
                      &smoothing,
                      &split};
    int pushed;
    if ((rc = xent_ctx_enter(ctx, &pushed))) return rc;
    CUresult r = ctx->drv->LaunchKernel(plan->fn, plan->grid, 1, 1, plan->block, 1, 1, plan->smem, (CUstream)stream,
                                        params, NULL);
    rc = r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(ctx, "cuLaunchKernel", r);
    if (!rc && plan->fn_finish) rc = launch_finish(plan, (CUstream)stream, a->loss, ws);
    xent_ctx_leave(ctx, pushed);
    return rc;
}

int xent_forward(xent_context *ctx, const xent_problem *p, const xent_args *args, void *stream) {
    xent_plan *plan;
    int rc = xent_plan_get(ctx, p, &plan);
    return rc ? rc : xent_plan_launch(plan, stream, args);
}
