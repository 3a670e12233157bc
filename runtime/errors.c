/* runtime/errors.c — the version, status texts, failure messages and problem checks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

int xent_version(void) { return XENT_VERSION; }

const char *xent_errstr(int rc) {
    switch (rc) {
    case XENT_OK: return "success";
    case XENT_EINVAL: return "invalid argument";
    case XENT_ENODRIVER: return "CUDA driver (libcuda.so.1) not available";
    case XENT_ENODEVICE: return "no such CUDA device";
    case XENT_ECUDA: return "CUDA driver call failed";
    case XENT_ECOMPILE: return "kernel compilation failed";
    case XENT_ENOMEM: return "out of memory";
    case XENT_ECACHE: return "tune cache error";
    case XENT_EBADTARGET: return "target outside [0, c) and not ignore_index";
    case XENT_ENOTFOUND: return "not found";
    default: return "unknown status";
    }
}

/* Failures are recorded per thread as well as per context: threads that
 * share a context fail at the same time (a refused problem in one, a
 * compile error in another), and one buffer written by both raced, so a
 * caller could read another thread's message, or a torn one. Each thread's
 * own last message on a context is kept in a buffer of that thread's, made
 * at its first failure; the context keeps the last of any thread, written
 * and copied under its lock. A context's id, not its address, names it
 * there: a later context may be allocated at a destroyed one's address. */
typedef struct thread_msg {
    const xent_context *ctx;
    uint64_t id;
    char text[sizeof((xent_context *)0)->errmsg];
} thread_msg;

static pthread_key_t msg_key;
static pthread_once_t msg_once = PTHREAD_ONCE_INIT;
static int msg_key_ok;

static void make_msg_key(void) { msg_key_ok = pthread_key_create(&msg_key, free) == 0; }

static thread_msg *this_thread(void) {
    pthread_once(&msg_once, make_msg_key);
    if (!msg_key_ok) return NULL;
    thread_msg *m = pthread_getspecific(msg_key);
    if (!m && (m = calloc(1, sizeof *m)) && pthread_setspecific(msg_key, m)) {
        free(m);
        m = NULL;
    }
    return m;
}

static void record(xent_context *ctx, const char *text) {
    thread_msg *m = this_thread();
    if (m) {
        m->ctx = ctx;
        m->id = ctx->id;
        snprintf(m->text, sizeof m->text, "%s", text);
    }
    pthread_mutex_lock(&ctx->msg_lock);
    snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s", text);
    pthread_mutex_unlock(&ctx->msg_lock);
}

/* Formatted apart from the thread's buffer: an argument may be the text
 * xent_errmsg returned, that very buffer. */
int xent_fail(xent_context *ctx, int rc, const char *fmt, ...) {
    if (!ctx) return rc;
    char small[512], *text = malloc(sizeof ctx->errmsg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text ? text : small, text ? sizeof ctx->errmsg : sizeof small, fmt, ap);
    va_end(ap);
    record(ctx, text ? text : small);
    free(text);
    return rc;
}

int xent_fail_cuda(xent_context *ctx, const char *call, CUresult r) {
    char text[512];
    if (!ctx) return XENT_ECUDA;
    xent_driver_describe(ctx->drv, call, r, text, sizeof text);
    record(ctx, text);
    return XENT_ECUDA;
}

const char *xent_errmsg(const xent_context *ctx) {
    if (!ctx) return "";
    thread_msg *m = this_thread();
    if (m && m->ctx == ctx && m->id == ctx->id) return m->text;
    if (!m) return ctx->errmsg;            /* no memory for a copy: the shared text, as it is */
    xent_context *c = (xent_context *)ctx; /* the lock is not part of what const promises */
    pthread_mutex_lock(&c->msg_lock);
    snprintf(m->text, sizeof m->text, "%s", ctx->errmsg);
    pthread_mutex_unlock(&c->msg_lock);
    m->ctx = ctx;
    m->id = ctx->id;
    return m->text;
}

void xent_problem_init(xent_problem *p, int64_t n, int64_t c) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->c = c;
    p->row_stride = c;
    p->logits = XENT_F32;
    p->targets = XENT_I64;
    p->reduction = XENT_REDUCE_MEAN;
    p->ignore_index = -100;
}

static int why_not(char *why, size_t len, const char *text) {
    if (why && len) snprintf(why, len, "%s", text);
    return XENT_EINVAL;
}

/* The fields of the gradient, the training options and vocabulary shards. */
static int check_training(const xent_problem *p, char *why, size_t len) {
    if ((unsigned)p->op > XENT_OP_RESCALE)
        return why_not(why, len, "op must be forward, fused, backward, combine or rescale");
    if (!(p->z_loss >= 0.0f && p->z_loss < INFINITY)) return why_not(why, len, "z_loss must be finite and >= 0");
    if (!(p->softcap >= 0.0f && p->softcap < INFINITY))
        return why_not(why, len, "softcap must be finite and >= 0 (0 is off)");
    if (p->z_loss > 0.0f && p->has_weights)
        return why_not(why, len, "z_loss with class weights is not defined (PyTorch has no z-loss to follow)");
    int shard = p->vocab != 0;
    if (shard && (p->vocab < p->c || p->vocab > 0x7fffffffLL))
        return why_not(why, len, "vocab must be 0 (no shard) or in [c, 2^31)");
    if (p->class_offset < 0 || (shard ? p->class_offset > p->vocab - p->c : p->class_offset != 0))
        return why_not(why, len, "class_offset must place the c columns inside the vocabulary (0 without a shard)");
    if (shard && p->has_weights) return why_not(why, len, "vocabulary shards take no class weights");
    if (shard && (p->op == XENT_OP_FUSED || p->op == XENT_OP_COMBINE || p->op == XENT_OP_RESCALE))
        return why_not(why, len, "a shard runs XENT_OP_FORWARD (its partials) and XENT_OP_BACKWARD only");
    if (p->op == XENT_OP_COMBINE) {
        if (p->shards < 1) return why_not(why, len, "XENT_OP_COMBINE needs shards >= 1");
        if (p->has_weights) return why_not(why, len, "XENT_OP_COMBINE takes no class weights");
    } else if (p->shards != 0)
        return why_not(why, len, "shards is only for XENT_OP_COMBINE");
    return XENT_OK;
}

int xent_problem_check(const xent_problem *p, char *why, size_t len) {
    if (!p) return why_not(why, len, "problem is NULL");
    if (p->n < 1) return why_not(why, len, "n must be >= 1");
    if (p->c < 1) return why_not(why, len, "c must be >= 1");
    if (p->c > 0x7fffffffLL) return why_not(why, len, "c must be < 2^31");
    if (p->row_stride != 0 && p->row_stride < p->c) return why_not(why, len, "row_stride must be >= c");
    if ((unsigned)p->logits > XENT_BF16)
        return why_not(why, len, "logits dtype must be XENT_F32, XENT_F16 or XENT_BF16");
    if ((unsigned)p->targets > XENT_I64) return why_not(why, len, "targets dtype must be XENT_I32 or XENT_I64");
    if ((unsigned)p->reduction > XENT_REDUCE_MEAN) return why_not(why, len, "reduction must be none, sum or mean");
    if (!(p->label_smoothing >= 0.0f && p->label_smoothing <= 1.0f))
        return why_not(why, len, "label_smoothing must be in [0, 1]");
    if (p->n > INT64_MAX / 128 / xent_row_stride(p))
        return why_not(why, len, "n * row_stride is too large");
    return check_training(p, why, len);
}

void xent_problem_normalize(const xent_problem *p, xent_problem *out) {
    memset(out, 0, sizeof *out);
    out->n = p->n;
    out->c = p->c;
    out->row_stride = xent_row_stride(p);
    out->logits = p->logits;
    out->targets = p->targets;
    out->reduction = p->reduction;
    out->ignore_index = p->ignore_index;
    out->label_smoothing = p->label_smoothing;
    out->has_weights = p->has_weights ? 1 : 0;
    out->write_lse = p->write_lse ? 1 : 0;
    out->op = p->op;
    out->z_loss = p->z_loss;
    out->softcap = p->softcap;
    out->vocab = p->vocab;
    out->class_offset = p->class_offset;
    out->shards = p->shards;
}
