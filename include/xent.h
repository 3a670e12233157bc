/*
 * xent.h — the whole public C API of xent: generated, autotuned CUDA
 * kernels for the softmax cross-entropy loss with the semantics of PyTorch's
 * torch.nn.functional.cross_entropy(logits, targets) for class-index
 * targets: the forward, its gradient, both from one read of the logits, and
 * vocabulary shards for tensor parallelism.
 *
 * Conventions (as in SQLite): opaque handles, every function returns an int
 * status (XENT_OK on success), xent_errstr(rc) gives the static text of a
 * status and xent_errmsg(ctx) the detailed message of the context's last
 * failure (NVRTC and JIT logs included). The library never prints and never
 * exits. The CUDA driver is loaded with dlopen("libcuda.so.1") at first use,
 * so programs linked with xent start on machines without a GPU.
 */
#ifndef XENT_H
#define XENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header (major*10000 + minor*100 + patch). The major is
 * the shared library's SONAME number (libxent.so.0): it changes when the ABI
 * breaks. */
#define XENT_VERSION 100

/* What the shared library exports: it is built with -fvisibility=hidden, so
 * the functions declared here are its only symbols. */
#ifndef XENT_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define XENT_API __attribute__((visibility("default")))
#else
#define XENT_API
#endif
#endif

/** Status codes returned by every function. */
enum xent_status {
    XENT_OK = 0,         /**< success */
    XENT_EINVAL = 1,     /**< an argument is invalid (the message says which) */
    XENT_ENODRIVER = 2,  /**< libcuda.so.1 could not be loaded */
    XENT_ENODEVICE = 3,  /**< no CUDA device, or the ordinal is out of range */
    XENT_ECUDA = 4,      /**< a CUDA driver call failed (the message names it) */
    XENT_ECOMPILE = 5,   /**< NVRTC could not compile a kernel (log in the message) */
    XENT_ENOMEM = 6,     /**< host or device memory allocation failed */
    XENT_ECACHE = 7,     /**< the tune cache could not be read or written */
    XENT_EBADTARGET = 8, /**< a kernel saw a target outside [0, c) that is not ignore_index */
    /* 9 is not used: the codes keep their values across versions */
    XENT_ENOTFOUND = 10 /**< a looked-up entry does not exist */
};

/** Element type of the logits. */
typedef enum xent_dtype { XENT_F32 = 0, XENT_F16 = 1, XENT_BF16 = 2 } xent_dtype;

/** Element type of the class-index targets. */
typedef enum xent_index { XENT_I32 = 0, XENT_I64 = 1 } xent_index;

/** Reduction over rows, as PyTorch's `reduction=` argument. */
typedef enum xent_reduction {
    XENT_REDUCE_NONE = 0, /**< one fp32 loss per row (ignored rows give 0) */
    XENT_REDUCE_SUM = 1,  /**< the sum of the row losses, one fp32 */
    XENT_REDUCE_MEAN = 2  /**< the sum over the sum of the weights of the non-ignored targets
                               (NaN when that sum is 0, e.g. every target ignored, as PyTorch) */
} xent_reduction;

/**
 * What a launch computes. The gradient is always with respect to the
 * logits, in the logits' dtype, with the logits' row_stride.
 */
typedef enum xent_op {
    XENT_OP_FORWARD = 0,  /**< the loss (and each row's lse when write_lse). With vocab > c: the
                               shard's per-row partials into xent_args.stats instead */
    XENT_OP_FUSED = 1,    /**< the loss and the gradient from one read of the logits; the gradient
                               is scaled by *dloss (NULL: 1), as a backward given dloss would */
    XENT_OP_BACKWARD = 2, /**< the gradient from the logits, each row's lse (as the forward wrote it;
                               for shards the combined, global lse) and dloss */
    XENT_OP_COMBINE = 3,  /**< k = shards vocabulary shards' partials (xent_args.stats) into the
                               loss and each row's global lse; n is the rows, c the whole vocabulary */
    XENT_OP_RESCALE = 4   /**< multiply a gradient written by XENT_OP_FUSED with dloss NULL by
                               dloss, in place; rows whose factor is exactly 1 are not touched, so
                               a launch with dloss == 1 moves no gradient bytes. That gradient was
                               rounded to the logits' dtype at dloss 1: in fp16 a mean's p_j / n
                               is under the smallest subnormal for most classes of a large batch,
                               and a loss scale applied afterwards finds zeros. fp16 callers with a
                               dloss other than 1 give it to XENT_OP_FUSED or run XENT_OP_BACKWARD */
} xent_op;

/**
 * A problem: everything that selects a kernel. Fill it with
 * xent_problem_init(), which sets PyTorch's defaults, then change fields.
 */
typedef struct xent_problem {
    int64_t n;                /**< rows (batch), >= 1 */
    int64_t c;                /**< classes, >= 1 */
    int64_t row_stride;       /**< elements between row starts, >= c (default c) */
    xent_dtype logits;        /**< dtype of the logits (default XENT_F32) */
    xent_index targets;       /**< dtype of the targets (default XENT_I64) */
    xent_reduction reduction; /**< default XENT_REDUCE_MEAN */
    int64_t ignore_index;     /**< targets equal to this contribute nothing (default -100) */
    float label_smoothing;    /**< in [0, 1] (default 0) */
    int has_weights;          /**< nonzero: per-class fp32 weights are passed (default 0) */
    int write_lse;            /**< nonzero: also write each row's log-sum-exp (default 0) */
    xent_op op;               /**< what to compute (default XENT_OP_FORWARD) */
    float z_loss;             /**< >= 0: adds z_loss * lse^2 to each non-ignored row's loss (PaLM's
                                   z-loss; default 0); not with has_weights */
    float softcap;            /**< > 0: the logits become softcap * tanh(x / softcap) before the
                                   softmax (Gemma's soft-capping), in loss and gradient; 0 off (default) */
    int64_t vocab;            /**< a vocabulary shard: the c columns are classes [class_offset,
                                   class_offset + c) of vocab classes; targets index the whole
                                   vocabulary. 0 (default): no shard, vocab = c. Not with has_weights */
    int64_t class_offset;     /**< the shard's first class (default 0) */
    int shards;               /**< XENT_OP_COMBINE: the number of shards k (default 0) */
} xent_problem;

/** Device pointers and outputs of one forward call. */
typedef struct xent_args {
    const void *logits;   /**< device, n rows of row_stride elements, element-aligned */
    const void *targets;  /**< device, n int32 or int64 class indices */
    const float *weights; /**< device, c fp32 class weights; NULL unless has_weights */
    float *loss;          /**< device, 1 fp32 (sum, mean) or n fp32 (none) */
    float *lse;           /**< device, n fp32 log-sum-exp per row: written when write_lse (forward,
                               fused, combine), read by XENT_OP_BACKWARD; NULL otherwise */
    void *workspace;    /**< 16-byte aligned device scratch of xent_workspace_size bytes, or NULL for the plan's own */
    void *grad;         /**< XENT_OP_FUSED, _BACKWARD, _RESCALE: device, the gradient, n rows of
                             row_stride elements in the logits' dtype, at the same 16-byte phase as
                             the logits; may equal logits (in place); NULL otherwise */
    const float *dloss; /**< device, the upstream gradient of the loss: 1 float (sum, mean) or n
                             (none). Required by _BACKWARD and _RESCALE; optional for _FUSED */
    float *stats;       /**< a shard's forward (vocab > c): out, 2n floats, the rows' lse over
                             the shard then their linear part; XENT_OP_COMBINE: in, shards such
                             blocks of 2n floats, one after another */
} xent_args;

/** Where a plan's kernel configuration came from. */
typedef enum xent_source {
    XENT_SOURCE_USER_DB = 0,   /**< exact entry of the user's tune cache */
    XENT_SOURCE_SHIPPED = 1,   /**< exact entry of the tune cache shipped for this GPU */
    XENT_SOURCE_NEAREST = 2,   /**< the nearest tuned entry of this GPU and element size: by shape,
                                    a difference of targets type, reduction, options or 16-bit
                                    dtype weighing as a step in shape (the plan's note names an
                                    entry of another kind) */
    XENT_SOURCE_HEURISTIC = 3, /**< the built-in heuristic */
    XENT_SOURCE_EXPLICIT = 4,  /**< a configuration given by the caller */
    XENT_SOURCE_ARCH = 5       /**< the tune cache shipped for the nearest GPU of the same
                                    architecture (this GPU has none, or it had no answer) */
} xent_source;

/** An opaque per-device context (the device's primary CUDA context). */
typedef struct xent_context xent_context;

/** An opaque plan: a compiled, loaded kernel for one problem, owned by its context. */
typedef struct xent_plan xent_plan;

/**
 * The XENT_VERSION of the library that is running. It can differ from the
 * XENT_VERSION a program was compiled with when the shared library is
 * replaced; a program that needs what its header declares checks
 * `xent_version() >= XENT_VERSION` at start.
 */
XENT_API int xent_version(void);

/** Static English text of a status code; never NULL. */
XENT_API const char *xent_errstr(int rc);

/** Fill *p with PyTorch's defaults for an n x c problem (mean, int64, fp32, ignore -100). */
XENT_API void xent_problem_init(xent_problem *p, int64_t n, int64_t c);

/**
 * Check a problem's fields. Returns XENT_EINVAL and writes a reason into
 * why (if non-NULL, up to len bytes) when a field is out of range.
 */
XENT_API int xent_problem_check(const xent_problem *p, char *why, size_t len);

/**
 * Create a context on device `ordinal`, retaining the device's primary
 * context, so xent works beside PyTorch and other runtime-API users.
 * On failure *ctx may still be set so that xent_errmsg() can explain; destroy it.
 */
XENT_API int xent_context_create(xent_context **ctx, int ordinal);

/** Release a context, its plans, kernels and device memory. NULL is allowed. */
XENT_API void xent_context_destroy(xent_context *ctx);

/**
 * The detailed message of the calling thread's last failure on ctx, or, if
 * this thread has none, of the context's last failure in any thread ("" if
 * none); ctx may be NULL. The text stays valid until this thread's next call
 * into xent. Thread-safe: threads that fail at once each read their own.
 */
XENT_API const char *xent_errmsg(const xent_context *ctx);

/** Device facts: name, compute capability, multiprocessor count and the GPU key (e.g. "h200"). */
typedef struct xent_device_info {
    char name[256]; /**< as the driver reports it, e.g. "NVIDIA H200" */
    char key[32];   /**< short GPU key used by tune caches, e.g. "h200" */
    int cc_major, cc_minor;
    int sm_count;
    size_t l2_bytes;
    size_t global_mem_bytes;
} xent_device_info;

/** Describe the context's device. */
XENT_API int xent_device_get_info(xent_context *ctx, xent_device_info *info);

/**
 * Return the context's plan for *p, building it on first use (tune-cache
 * lookup: user DB, shipped DB, nearest tuned shape, the shipped cache of the
 * nearest GPU of the same architecture, heuristic; then NVRTC
 * compile, or a cached CUBIN). Later calls with an equal problem are a hash
 * lookup. The plan lives until the context is destroyed. Thread-safe.
 */
XENT_API int xent_plan_get(xent_context *ctx, const xent_problem *p, xent_plan **plan);

/**
 * The context's plan for *p if it was already built, without building one:
 * XENT_ENOTFOUND otherwise. Never compiles, allocates or synchronizes, so it
 * is safe while a stream is being captured into a CUDA graph.
 */
XENT_API int xent_plan_lookup(xent_context *ctx, const xent_problem *p, xent_plan **plan);

/** Where the plan's configuration came from. */
XENT_API xent_source xent_plan_source(const xent_plan *plan);

/** Bytes that always hold xent_plan_describe's text with its terminating NUL. */
#define XENT_DESCRIBE_LEN 1400

/**
 * Write the plan's configuration as text ("VEC=4 TPR=32 ...") into buf, with
 * its source, the tune cache that answered ("source=arch cache=h200"), its
 * grid ("finish=apart" where a kernel of its own sums a sum's or mean's
 * block partials after a grid of several rounds of blocks) and a
 * note naming each cache or entry passed over on the way, and why (a stale
 * entry, made by another template or NVRTC; a config that does not fit; a
 * cache that could not be read; no shipped cache found, and where it was
 * looked for). XENT_EINVAL where the text does not fit len bytes (it is then
 * cut short); XENT_DESCRIBE_LEN bytes always suffice.
 */
XENT_API int xent_plan_describe(const xent_plan *plan, char *buf, size_t len);

/** Bytes of device workspace a caller-provided xent_args.workspace must have (zeroed once before first use). */
XENT_API size_t xent_workspace_size(const xent_plan *plan);

/**
 * Launch the plan on `stream` (a CUstream or cudaStream_t; NULL is the
 * legacy default stream). Asynchronous: returns after the launch is queued.
 * Launches that share the plan's own workspace (args->workspace == NULL) must
 * be ordered (one stream, or synchronized); give concurrent streams their
 * own zeroed workspace. Thread-safe.
 */
XENT_API int xent_plan_launch(xent_plan *plan, void *stream, const xent_args *args);

/** xent_plan_get then xent_plan_launch: the one-call forward. */
XENT_API int xent_forward(xent_context *ctx, const xent_problem *p, const xent_args *args, void *stream);

/**
 * Synchronize `stream` and read the context's sticky bad-target flag:
 * XENT_EBADTARGET if any kernel launched since the last check saw a target
 * outside [0, c) that is not ignore_index (the losses involved are NaN);
 * the flag is then cleared. XENT_OK otherwise.
 */
XENT_API int xent_check_targets(xent_context *ctx, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* XENT_H */
