/* runtime/launch.c — the hot path: check pointers, launch. No allocation,
 * no lookup beyond the memo, no compile. */
#include "runtime/runtime.h"

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
    if ((uintptr_t)a->workspace % 16)
        return xent_fail(ctx, XENT_EINVAL, "xent_args: workspace is not 16-byte aligned");
    return XENT_OK;
}

int xent_plan_launch(xent_plan *plan, void *stream, const xent_args *a) {
    if (!plan) return XENT_EINVAL;
    int rc = check_args(plan, a);
    if (rc) return rc;
    xent_context *ctx = plan->ctx;
    const xent_problem *p = &plan->problem;
    CUdeviceptr ws = a->workspace ? (CUdeviceptr)a->workspace : plan->workspace;
    long long n = p->n, stride = p->row_stride, ignore = p->ignore_index;
    int c = (int)p->c, split = plan->config.split;
    float smoothing = p->label_smoothing;
    void *params[] = {(void *)&a->logits, (void *)&a->targets, (void *)&a->weights, (void *)&a->loss,
                      (void *)&a->lse, &ws, &ctx->err_flag, &n, &c, &stride, &ignore, &smoothing, &split};
    int pushed;
    if ((rc = xent_ctx_enter(ctx, &pushed))) return rc;
    CUresult r = ctx->drv->LaunchKernel(plan->fn, plan->grid, 1, 1, plan->block, 1, 1, plan->smem, (CUstream)stream,
                                        params, NULL);
    xent_ctx_leave(ctx, pushed);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(ctx, "cuLaunchKernel", r);
}

int xent_forward(xent_context *ctx, const xent_problem *p, const xent_args *args, void *stream) {
    xent_plan *plan;
    int rc = xent_plan_get(ctx, p, &plan);
    return rc ? rc : xent_plan_launch(plan, stream, args);
}
