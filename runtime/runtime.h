/*
 * runtime — contexts, plans and launches behind include/xent.h. This header
 * is internal: the tuner (tune/) builds candidate plans with it.
 */
#ifndef XENT_RUNTIME_H
#define XENT_RUNTIME_H

#include <pthread.h>
#include <stdarg.h>

#include "gen/space.h"
#include "runtime/driver.h"
#include "tunecache/tunecache.h"
#include "xent.h"

struct xent_plan {
    xent_context *ctx;
    xent_problem problem;    /* normalized: row_stride set, padding zeroed */
    xent_config config;
    xent_source source;
    xent_family family;
    CUmodule module;
    CUfunction fn;
    CUfunction fn_denom;     /* xent_grad: the weight sums a gradient needs first, or NULL */
    unsigned grid, block, smem; /* smem: dynamic shared memory bytes */
    unsigned denom_grid;
    CUdeviceptr workspace;
    size_t workspace_size;
    int registers, spill_bytes;
    char note[1024];         /* why a tune-cache source was skipped, if it was */
};

typedef struct plan_slot {
    uint64_t hash;
    xent_plan *plan;
} plan_slot;

struct xent_context {
    const xent_driver *drv;
    int ordinal;
    CUdevice dev;
    CUcontext cuctx;
    int arch;                /* 10*major + minor */
    xent_device_info info;
    CUdeviceptr err_flag;    /* sticky bad-target flag written by kernels */
    pthread_rwlock_t lock;   /* plans (read: lookups; write: building one), caches */
    plan_slot *slots;        /* open addressing, power-of-two capacity */
    size_t nslots, nplans;
    int dbs_opened;
    tc_db *user_db, *shipped_db;
    char db_note[1024];
    char errmsg[16384];
};

/* Record a failure's detail in ctx (if any) and return rc. */
int xent_fail(xent_context *ctx, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Describe a failed driver call into ctx and return XENT_ECUDA. */
int xent_fail_cuda(xent_context *ctx, const char *call, CUresult r);

/* Make ctx's CUDA context current for this thread; *pushed says whether to pop. */
int xent_ctx_enter(xent_context *ctx, int *pushed);
void xent_ctx_leave(xent_context *ctx, int pushed);

/* Copy p into *out with defaults applied and padding zeroed (a memo key). */
void xent_problem_normalize(const xent_problem *p, xent_problem *out);

/* Build a plan for p with an explicit config (not memoized); the caller owns it. */
int xent_plan_build(xent_context *ctx, const xent_problem *p, const xent_config *cfg,
                    xent_source source, xent_plan **out);
void xent_plan_destroy(xent_plan *plan);

/* The tune-cache key of a problem on this context's device. */
void xent_tc_key(const xent_context *ctx, const xent_problem *p, tc_key *key);

/* The short GPU key ("h200") of a device name ("NVIDIA H200"). */
void xent_gpu_key(const char *name, char *key, size_t len);

/* Grid, workspace size for cfg (needs the function for occupancy). */
int xent_launch_shape(xent_context *ctx, CUfunction fn, const xent_problem *p,
                      const xent_config *cfg, unsigned *grid, size_t *workspace);

#endif
