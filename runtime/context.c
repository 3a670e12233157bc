/* runtime/context.c — one context per device, on its primary CUDA context. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

void xent_gpu_key(const char *name, char *key, size_t len) {
    /* Vendor and brand words say nothing about the chip: "NVIDIA GeForce RTX
     * 4090" is "rtx4090", "NVIDIA H100 80GB HBM3" is "h100". */
    static const char *skip[] = {"NVIDIA ", "GeForce ", "Tesla ", "Quadro ", NULL};
    const char *s = name;
    for (int i = 0; skip[i]; i++)
        if (!strncmp(s, skip[i], strlen(skip[i]))) s += strlen(skip[i]);
    size_t n = 0;
    if (!strncmp(s, "RTX ", 4) && len > 4) {
        memcpy(key, "rtx", 3);
        n = 3;
        s += 4;
    }
    for (; *s && *s != ' ' && *s != '-' && n + 1 < len; s++)
        if (isalnum((unsigned char)*s)) key[n++] = (char)tolower((unsigned char)*s);
    if (len) key[n] = 0;
}

static int attr(xent_context *ctx, CUdevice_attribute a, int *out) {
    CUresult r = ctx->drv->DeviceGetAttribute(out, a, ctx->dev);
    return r == CUDA_SUCCESS ? XENT_OK : xent_fail_cuda(ctx, "cuDeviceGetAttribute", r);
}

static int read_device(xent_context *ctx) {
    const xent_driver *d = ctx->drv;
    xent_device_info *info = &ctx->info;
    CUresult r = d->DeviceGetName(info->name, (int)sizeof info->name, ctx->dev);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuDeviceGetName", r);
    xent_gpu_key(info->name, info->key, sizeof info->key);
    int l2 = 0, rc;
    if ((rc = attr(ctx, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major)) ||
        (rc = attr(ctx, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor)) ||
        (rc = attr(ctx, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->sm_count)) ||
        (rc = attr(ctx, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &l2)))
        return rc;
    info->l2_bytes = (size_t)l2;
    r = d->DeviceTotalMem(&info->global_mem_bytes, ctx->dev);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuDeviceTotalMem", r);
    ctx->arch = info->cc_major * 10 + info->cc_minor;
    return XENT_OK;
}

int xent_ctx_enter(xent_context *ctx, int *pushed) {
    CUcontext cur = NULL;
    *pushed = 0;
    if (ctx->drv->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx->cuctx) return XENT_OK;
    CUresult r = ctx->drv->CtxPushCurrent(ctx->cuctx);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuCtxPushCurrent", r);
    *pushed = 1;
    return XENT_OK;
}

void xent_ctx_leave(xent_context *ctx, int pushed) {
    CUcontext popped;
    if (pushed) ctx->drv->CtxPopCurrent(&popped);
}

static int open_device(xent_context *ctx, int ordinal) {
    int count = 0;
    CUresult r = ctx->drv->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuDeviceGetCount", r);
    if (ordinal < 0 || ordinal >= count)
        return xent_fail(ctx, XENT_ENODEVICE, "device %d requested, %d present", ordinal, count);
    if ((r = ctx->drv->DeviceGet(&ctx->dev, ordinal)) != CUDA_SUCCESS) return xent_fail_cuda(ctx, "cuDeviceGet", r);
    if ((r = ctx->drv->DevicePrimaryCtxRetain(&ctx->cuctx, ctx->dev)) != CUDA_SUCCESS)
        return xent_fail_cuda(ctx, "cuDevicePrimaryCtxRetain", r);
    int rc = read_device(ctx), pushed;
    if (rc || (rc = xent_ctx_enter(ctx, &pushed))) return rc;
    if ((r = ctx->drv->MemAlloc(&ctx->err_flag, 16)) != CUDA_SUCCESS ||
        (r = ctx->drv->MemsetD8(ctx->err_flag, 0, 16)) != CUDA_SUCCESS ||
        (r = ctx->drv->StreamSynchronize(NULL)) != CUDA_SUCCESS) /* see alloc_workspace */
        rc = xent_fail_cuda(ctx, "allocating the error flag", r);
    xent_ctx_leave(ctx, pushed);
    return rc;
}

int xent_context_create(xent_context **out, int ordinal) {
    if (!out) return XENT_EINVAL;
    *out = NULL;
    xent_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return XENT_ENOMEM;
    static _Atomic uint64_t next_id = 1;
    pthread_rwlock_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->msg_lock, NULL);
    ctx->id = next_id++;
    ctx->ordinal = ordinal;
    *out = ctx;
    int rc;
    char why[512];
    ctx->drv = xent_driver_load(&rc, why, sizeof why);
    if (!ctx->drv) return xent_fail(ctx, rc, "%s", why);
    return open_device(ctx, ordinal);
}

void xent_context_destroy(xent_context *ctx) {
    if (!ctx) return;
    int pushed = 0, entered = ctx->cuctx && xent_ctx_enter(ctx, &pushed) == XENT_OK;
    for (size_t i = 0; i < ctx->nslots; i++)
        if (ctx->slots[i].plan) xent_plan_destroy(ctx->slots[i].plan);
    free(ctx->slots);
    if (ctx->err_flag) ctx->drv->MemFree(ctx->err_flag);
    if (entered) xent_ctx_leave(ctx, pushed);
    if (ctx->cuctx) ctx->drv->DevicePrimaryCtxRelease(ctx->dev);
    xent_caches_close(&ctx->caches);
    pthread_rwlock_destroy(&ctx->lock);
    pthread_mutex_destroy(&ctx->msg_lock);
    free(ctx);
}

int xent_device_get_info(xent_context *ctx, xent_device_info *info) {
    if (!ctx || !info) return xent_fail(ctx, XENT_EINVAL, "xent_device_get_info: NULL argument");
    if (!ctx->cuctx) return xent_fail(ctx, XENT_ENODEVICE, "context has no device");
    *info = ctx->info;
    return XENT_OK;
}

int xent_check_targets(xent_context *ctx, void *stream) {
    if (!ctx) return XENT_EINVAL;
    if (!ctx->cuctx) return xent_fail(ctx, XENT_ENODEVICE, "context has no device");
    int pushed, rc = xent_ctx_enter(ctx, &pushed), flag = 0;
    if (rc) return rc;
    CUresult r = ctx->drv->StreamSynchronize((CUstream)stream);
    if (r == CUDA_SUCCESS) r = ctx->drv->MemcpyDtoH(&flag, ctx->err_flag, sizeof flag);
    if (r == CUDA_SUCCESS && flag) r = ctx->drv->MemsetD8Async(ctx->err_flag, 0, sizeof flag, (CUstream)stream);
    if (r == CUDA_SUCCESS && flag) r = ctx->drv->StreamSynchronize((CUstream)stream);
    if (r != CUDA_SUCCESS)
        rc = xent_fail_cuda(ctx, "xent_check_targets", r);
    else if (flag)
        rc = xent_fail(ctx, XENT_EBADTARGET,
                       "a target outside [0, c) that is not ignore_index was seen; its losses are NaN");
    xent_ctx_leave(ctx, pushed);
    return rc;
}
