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
    xent_problem problem; /* normalized: row_stride set, padding zeroed */
    xent_config config;
    xent_source source;
    xent_family family;
    CUmodule module;
    CUfunction fn;
    CUfunction fn_denom;        /* xent_grad: the weight sums a gradient needs first, or NULL */
    unsigned grid, block, smem; /* smem: dynamic shared memory bytes */
    unsigned denom_grid;
    int dependent;        /* the rows launched as a programmatic dependent of fn_denom, or
                             xent_fwd_finish as one of the rows (a launch with that attribute) */
    CUfunction fn_finish; /* xent_fwd: the loss from the blocks' partials, after the grid, or NULL */
    CUdeviceptr workspace;
    size_t workspace_size;
    int registers, spill_bytes;
    char cache[32];  /* the tune cache that answered: "user" or a shipped cache's GPU key */
    char note[1024]; /* why a tune cache or an entry was skipped, if one was */
};

/* The tune caches a context reads, opened at its first plan miss. */
typedef struct xent_caches {
    int opened;
    tc_db *user;                /* the user's cache, read-only */
    tc_db *shipped;             /* <datadir>/<gpu>.sql, in memory */
    tc_db *arch;                /* the nearest sibling's shipped cache (may be shipped itself) */
    char gpu[32], arch_gpu[32]; /* the GPU keys of shipped and arch */
    char datadir[512];          /* where the shipped caches were looked for */
    char note[1024];            /* why a cache was skipped */
} xent_caches;

/* A GPU the library knows: its key, architecture and SM counts. */
typedef struct xent_gpu_spec {
    const char *key;
    int cc;     /* 10*major + minor */
    int sms[3]; /* multiprocessor counts of its variants */
} xent_gpu_spec;

/* The known GPUs, ended by a NULL key; within an architecture in order of preference. */
extern const xent_gpu_spec xent_known_gpus[];
const xent_gpu_spec *xent_gpu_find(const char *key);

typedef struct plan_slot {
    uint64_t hash;
    xent_plan *plan;
} plan_slot;

struct xent_context {
    const xent_driver *drv;
    int ordinal;
    CUdevice dev;
    CUcontext cuctx;
    int arch; /* 10*major + minor */
    xent_device_info info;
    CUdeviceptr err_flag;  /* sticky bad-target flag written by kernels */
    pthread_rwlock_t lock; /* plans (read: lookups; write: building one), caches */
    plan_slot *slots;      /* open addressing, power-of-two capacity */
    size_t nslots, nplans;
    xent_caches caches;
    uint64_t id;              /* unique in the process: names the context in per-thread messages */
    pthread_mutex_t msg_lock; /* errmsg: written and copied under it (runtime/errors.c) */
    char errmsg[16384];       /* the last failure of any thread */
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
int xent_plan_build(xent_context *ctx, const xent_problem *p, const xent_config *cfg, xent_source source,
                    xent_plan **out);
void xent_plan_destroy(xent_plan *plan);

/* The tune-cache key of a problem on this context's device. */
void xent_tc_key(const xent_context *ctx, const xent_problem *p, tc_key *key);
/* The same for a GPU named by its key, architecture and SM count. */
void xent_tc_key_for(const char *gpu, int arch, int sm_count, const xent_problem *p, tc_key *key);

/* Set key's stamps: the hash of its family's template and the NVRTC version. */
void xent_tc_stamp(tc_key *key);

/* Where shipped caches are: $XENT_DATADIR, else the installed share/xent. */
const char *xent_datadir(void);

/* The GPU whose shipped cache (<datadir>/<key>.sql, present) a GPU of this
 * architecture and SM count uses when its own has no answer: a known GPU of
 * the same architecture with the nearest SM count, the GPU itself first
 * among equals when include_own, else the table's order. XENT_ENOTFOUND if none. */
int xent_arch_sibling(const char *gpu, int arch, int sm_count, const char *datadir, int include_own, char *out,
                      size_t len);

/* Open the caches for GPU key gpu: the user's (tc_user_path), the shipped
 * <datadir>/<gpu>.sql and the arch sibling's. A cache that cannot be read is
 * left NULL with the reason in c->note. Close with xent_caches_close. */
void xent_caches_open(xent_caches *c, const char *gpu, int arch, int sm_count, const char *datadir);
void xent_caches_close(xent_caches *c);

/* The configuration for p, whose tune-cache key is key: the lookup chain of
 * tc_lookup over c, each entry checked to parse and fit p, then the
 * heuristic (for key->sm_count). a says which cache answered and what was
 * passed over, after the caches' own note (c->note); a heuristic's answer where
 * no shipped cache was found says where they were looked for. */
xent_source xent_choose_config(const xent_caches *c, const tc_key *key, const xent_problem *p, xent_config *cfg,
                               tc_answer *a);

/* What the runtime on GPU gpu (its architecture and SM count) would run for
 * p without a GPU present: the caches opened as a context opens them, the
 * chain of xent_choose_config, the caches closed. */
xent_source xent_lookup_offline(const char *gpu, int arch, int sm_count, const xent_problem *p, xent_config *cfg,
                                tc_answer *a);

/* "nearest": a plan source as xent_plan_describe names it. */
const char *xent_source_text(xent_source s);

/* The short GPU key ("h200") of a device name ("NVIDIA H200"). */
void xent_gpu_key(const char *name, char *key, size_t len);

/* Grid, workspace size for cfg (needs the function for occupancy). */
int xent_launch_shape(xent_context *ctx, CUfunction fn, const xent_problem *p, const xent_config *cfg, unsigned *grid,
                      size_t *workspace);

#endif
