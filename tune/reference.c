/*
 * reference.c — float64 CPU reference of F.cross_entropy (see reference.h).
 *
 * Layout: argument checks; per-row math on a row widened to double; fixed
 * row chunks spread over threads (tune/parallel.h), their partials added in
 * chunk order (deterministic whatever the thread count); host
 * fp16/bf16 conversions; relative errors.
 */
#include "tune/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune/parallel.h"

/* ------------------------------------------------------------------------ */
/* Argument checks (local: the library's xent_problem_check may not exist   */
/* yet, and the reference must stand alone in the tuner and GPU tests).     */
/* ------------------------------------------------------------------------ */

static int ref_check_problem(const xent_problem *p) {
    if (p->n < 1 || p->c < 1 || p->row_stride < p->c) return XENT_EINVAL;
    if (p->n > INT64_MAX / p->row_stride) /* element offsets must fit int64 */
        return XENT_EINVAL;
    if (p->logits != XENT_F32 && p->logits != XENT_F16 && p->logits != XENT_BF16) return XENT_EINVAL;
    if (p->targets != XENT_I32 && p->targets != XENT_I64) return XENT_EINVAL;
    if (p->reduction != XENT_REDUCE_NONE && p->reduction != XENT_REDUCE_SUM && p->reduction != XENT_REDUCE_MEAN)
        return XENT_EINVAL;
    /* written so that NaN fails too */
    if (!(p->label_smoothing >= 0.0f && p->label_smoothing <= 1.0f)) return XENT_EINVAL;
    return XENT_OK;
}

static int ref_check_args(const xent_problem *p, const void *logits, const void *targets, const float *weights,
                          const double *out) {
    if (!p || !logits || !targets || !out) return XENT_EINVAL;
    /* weights must match has_weights both ways: a stray pointer is a caller bug */
    if ((p->has_weights != 0) != (weights != NULL)) return XENT_EINVAL;
    return ref_check_problem(p);
}

/* ------------------------------------------------------------------------ */
/* Per-row math                                                             */
/* ------------------------------------------------------------------------ */

/* Widen row i to doubles once, so the later passes (max, exp-sum, smoothing)
 * read one format and the conversions are not repeated. */
static void ref_load_row(const xent_problem *p, const void *logits, int64_t i, double *x) {
    const int64_t off = i * p->row_stride;
    if (p->logits == XENT_F32) {
        const float *r = (const float *)logits + off;
        for (int64_t j = 0; j < p->c; j++) x[j] = r[j];
    } else if (p->logits == XENT_F16) {
        const uint16_t *r = (const uint16_t *)logits + off;
        for (int64_t j = 0; j < p->c; j++) x[j] = xent_half_to_float(r[j]);
    } else {
        const uint16_t *r = (const uint16_t *)logits + off;
        for (int64_t j = 0; j < p->c; j++) x[j] = xent_bf16_to_float(r[j]);
    }
}

static int64_t ref_target(const xent_problem *p, const void *targets, int64_t i) {
    if (p->targets == XENT_I32) return ((const int32_t *)targets)[i];
    return ((const int64_t *)targets)[i];
}

/* A row's softmax statistics: its max and log(sum_j exp(x_j - max)). Losses
 * are formed from (x_j - max), as PyTorch's log_softmax does, never from
 * lse - x_j: with |max| ~ 1e30, lse = max + log(s) rounds log(s) away. */
typedef struct ref_row_stats {
    double max;  /* NaN if the row holds a NaN */
    double logs; /* log(sum_j exp(x_j - max)), in [0, log c] */
    double lse;  /* as torch.logsumexp: NaN if any NaN, +inf if any +inf, -inf if all -inf */
} ref_row_stats;

static ref_row_stats ref_row_softmax(const double *x, int64_t c) {
    ref_row_stats st = {-INFINITY, 0.0, 0.0};
    int has_nan = 0;
    for (int64_t j = 0; j < c; j++) {
        if (x[j] > st.max)
            st.max = x[j];
        else if (isnan(x[j]))
            has_nan = 1;
    }
    if (has_nan) {
        st.max = st.logs = st.lse = NAN;
        return st;
    }
    if (isinf(st.max)) { /* x - max would be NaN: no finite statistics */
        st.logs = NAN;
        st.lse = st.max;
        return st;
    }
    double s = 0.0; /* >= 1: the max contributes exp(0) */
    for (int64_t j = 0; j < c; j++) s += exp(x[j] - st.max);
    st.logs = log(s);
    st.lse = st.max + st.logs;
    return st;
}

/* Loss of a non-ignored row with a valid target t, as PyTorch computes it:
 * -log_softmax_j = logs - (x_j - max). */
static double ref_row_loss(const double *x, int64_t c, int64_t t, ref_row_stats st, const float *w, double eps) {
    /* log_softmax is NaN across a row of only -inf, or one holding +inf or
     * NaN, so PyTorch's loss is NaN whatever the target. */
    if (isnan(st.logs)) return NAN;
    const double nll = (w ? (double)w[t] : 1.0) * (st.logs - (x[t] - st.max));
    /* PyTorch takes the smoothing path only for eps > 0; skipping it at 0
     * also avoids 0 * inf = NaN from a -inf logit. */
    if (eps == 0.0) return nll;
    double smooth = 0.0; /* summed term by term: each is >= 0, no cancellation */
    for (int64_t j = 0; j < c; j++) smooth += (w ? (double)w[j] : 1.0) * (st.logs - (x[j] - st.max));
    return (1.0 - eps) * nll + (eps / (double)c) * smooth;
}

/* ------------------------------------------------------------------------ */
/* Chunked, threaded driver                                                 */
/* ------------------------------------------------------------------------ */

/* Partials of one chunk of rows; added in chunk order at the end. */
typedef struct ref_partial {
    double loss;   /* sum of row losses */
    double weight; /* sum of w[t] (or 1) over non-ignored valid rows */
    int64_t bad;   /* rows with a bad target */
} ref_partial;

typedef struct ref_job {
    const xent_problem *p;
    const void *logits, *targets;
    const float *w;
    double eps;
    double *rows; /* per-row losses (reduction none) or NULL */
    double *lse;  /* per-row lse or NULL */
    int64_t rows_per_chunk, nchunks;
    ref_partial *parts; /* nchunks */
    double *scratch;    /* c doubles a thread: the widened row */
} ref_job;

static void ref_do_row(ref_job *jb, int64_t i, double *x, ref_partial *pt) {
    const xent_problem *p = jb->p;
    ref_load_row(p, jb->logits, i, x);
    const ref_row_stats st = ref_row_softmax(x, p->c);
    if (jb->lse) jb->lse[i] = st.lse;
    const int64_t t = ref_target(p, jb->targets, i);
    double loss = 0.0;
    /* ignore_index is tested first: it may lie inside [0, c) */
    if (t != p->ignore_index) {
        if (t < 0 || t >= p->c) {
            loss = NAN;
            pt->bad++;
        } else {
            loss = ref_row_loss(x, p->c, t, st, jb->w, jb->eps);
            pt->weight += jb->w ? (double)jb->w[t] : 1.0;
        }
    }
    pt->loss += loss;
    if (jb->rows) jb->rows[i] = loss;
}

static void ref_do_chunk(void *arg, int64_t k, int thread) {
    ref_job *jb = arg;
    ref_partial pt = {0.0, 0.0, 0};
    const int64_t lo = k * jb->rows_per_chunk;
    int64_t hi = lo + jb->rows_per_chunk;
    if (hi > jb->p->n) hi = jb->p->n;
    for (int64_t i = lo; i < hi; i++) ref_do_row(jb, i, jb->scratch + (size_t)thread * (size_t)jb->p->c, &pt);
    jb->parts[k] = pt;
}

static void ref_finish(const ref_job *jb, double *out, int64_t *bad_rows) {
    double loss = 0.0, weight = 0.0;
    int64_t bad = 0;
    for (int64_t k = 0; k < jb->nchunks; k++) {
        loss += jb->parts[k].loss;
        weight += jb->parts[k].weight;
        bad += jb->parts[k].bad;
    }
    if (jb->p->reduction == XENT_REDUCE_SUM)
        out[0] = loss;
    else if (jb->p->reduction == XENT_REDUCE_MEAN)
        /* PyTorch divides its nll and smoothing means separately by the same
         * weight: a zero weight makes the nll part 0/0 = NaN, so the mean is NaN
         * even when the smoothing part alone would be finite or infinite. */
        out[0] = weight == 0.0 ? NAN : loss / weight;
    if (bad_rows) *bad_rows = bad;
}

int xent_ref_forward(const xent_problem *p, const void *logits, const void *targets, const float *weights, double *out,
                     double *lse, int64_t *bad_rows) {
    int rc = ref_check_args(p, logits, targets, weights, out);
    if (rc != XENT_OK) return rc;
    if ((uint64_t)p->c > SIZE_MAX / sizeof(double) / TUNE_MAX_THREADS) return XENT_ENOMEM;

    ref_job jb;
    memset(&jb, 0, sizeof jb);
    jb.p = p;
    jb.logits = logits;
    jb.targets = targets;
    jb.w = weights;
    jb.eps = (double)p->label_smoothing;
    jb.rows = p->reduction == XENT_REDUCE_NONE ? out : NULL;
    jb.lse = lse;
    jb.rows_per_chunk = tune_rows_per_chunk(p->c);
    jb.nchunks = (p->n + jb.rows_per_chunk - 1) / jb.rows_per_chunk;

    int nthr = tune_work_threads(p->n * p->c, jb.nchunks);
    jb.parts = malloc((size_t)jb.nchunks * sizeof(ref_partial));
    jb.scratch = jb.parts ? tune_alloc_scratch(p->c, &nthr) : NULL;
    if (!jb.scratch) {
        free(jb.parts);
        return XENT_ENOMEM;
    }
    tune_parallel(jb.nchunks, nthr, ref_do_chunk, &jb);
    ref_finish(&jb, out, bad_rows);
    free(jb.scratch);
    free(jb.parts);
    return XENT_OK;
}

/* ------------------------------------------------------------------------ */
/* Host fp16 / bf16 conversions (bit manipulation: no reliance on _Float16)  */
/* ------------------------------------------------------------------------ */

static uint32_t ref_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float ref_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float xent_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float */
        const float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) /* inf or NaN, payload kept */
        return ref_bits_f32(sign | 0x7f800000u | (man << 13));
    return ref_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Shift m right by s (1..31) rounding to nearest, ties to even. */
static uint32_t ref_shift_rne(uint32_t m, unsigned s) {
    const uint32_t q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1u);
    const uint32_t half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

uint16_t xent_float_to_half(float f) {
    const uint32_t u = ref_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: force the quiet bit so a payload never becomes inf */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf (65504 is odd: the tie goes up) */
        return (uint16_t)(sign | 0x7c00u);
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u; /* implicit bit */
    if (e < 102)                                    /* below 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
        return sign;
    if (e < 113) /* half subnormal: value = m * 2^(e-150) = h * 2^-24 */
        return (uint16_t)(sign | ref_shift_rne(m, 126u - e));
    /* normal; a mantissa carry correctly bumps the exponent */
    const uint32_t h = ((e - 112u) << 10) + ref_shift_rne(m, 13) - 0x400u;
    return (uint16_t)(sign | h);
}

double xent_ref_elem(const void *x, xent_dtype d, int64_t k) {
    if (d == XENT_F32) return ((const float *)x)[k];
    const uint16_t h = ((const uint16_t *)x)[k];
    return d == XENT_F16 ? xent_half_to_float(h) : xent_bf16_to_float(h);
}

double xent_ref_round(xent_dtype d, double v) {
    const float f = (float)v;
    if (d == XENT_F32) return f;
    return d == XENT_F16 ? xent_half_to_float(xent_float_to_half(f)) : xent_bf16_to_float(xent_float_to_bf16(f));
}

float xent_bf16_to_float(uint16_t b) { return ref_bits_f32((uint32_t)b << 16); }

uint16_t xent_float_to_bf16(float f) {
    const uint32_t u = ref_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* round to nearest even on the low 16 bits; overflow carries into inf */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ------------------------------------------------------------------------ */
/* Relative errors                                                          */
/* ------------------------------------------------------------------------ */

double xent_rel_err(double a, double b) {
    if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0.0 : INFINITY;
    if (a == b) /* equal infinities and +0 == -0 too */
        return 0.0;
    if (isinf(a) || isinf(b)) return INFINITY;
    return fabs(a - b) / fmax(fabs(b), XENT_REL_ERR_TINY);
}

double xent_rel_err_vec(const float *a, const double *b, int64_t n) {
    if (n <= 0) return 0.0;
    if (!a || !b) return NAN;
    xent_err_acc acc = {0};
    for (int64_t i = 0; i < n && !acc.bad; i++) xent_err_acc_add(&acc, a[i], b[i]);
    return xent_err_acc_value(&acc);
}

void xent_err_acc_add(xent_err_acc *acc, double a, double b) {
    if (!isfinite(a) || !isfinite(b)) {
        if (!((isnan(a) && isnan(b)) || a == b)) /* matching non-finite values are left out */
            acc->bad = 1;
        return;
    }
    acc->d2 += (a - b) * (a - b);
    acc->b2 += b * b;
}

double xent_err_acc_value(const xent_err_acc *acc) {
    return acc->bad ? INFINITY : sqrt(acc->d2) / fmax(sqrt(acc->b2), XENT_REL_ERR_TINY);
}
