/*
 * grad_ref.c — float64 CPU reference of the training ops: the loss with
 * z-loss and soft-capping, each row's log-sum-exp, and the gradient with
 * respect to the logits (see reference.h). Written from the definitions, not
 * from the kernels: loss_i = (1-eps) w_t (lse - y_t) + eps/C sum_j w_j (lse - y_j)
 * + z lse^2 over y = cap tanh(x / cap), differentiated by hand:
 * d loss_i / d x_j = (p_j (w_t (1-eps) + eps/C W + 2 z lse) - (1-eps) w_t [j = t]
 * - eps/C w_j) (1 - tanh^2), times dloss (over sum_i w_t for a mean).
 */
#include "tune/reference.h"

#include <math.h>
#include <stdlib.h>

#include "tune/parallel.h"

static double ref_elem(const xent_problem *p, const void *logits, int64_t i, int64_t j) {
    return xent_ref_elem(logits, p->logits, i * p->row_stride + j);
}

static int64_t ref_tgt(const xent_problem *p, const void *targets, int64_t i) {
    return p->targets == XENT_I32 ? ((const int32_t *)targets)[i] : ((const int64_t *)targets)[i];
}

/* The row as the softmax sees it, its max and log of the shifted sum. */
static void ref_capped_row(const xent_problem *p, const void *logits, int64_t i, double *y, double *max, double *logs) {
    double m = -INFINITY;
    for (int64_t j = 0; j < p->c; j++) {
        double x = ref_elem(p, logits, i, j);
        y[j] = p->softcap > 0.0f ? (double)p->softcap * tanh(x / (double)p->softcap) : x;
        if (y[j] > m) m = y[j];
    }
    double s = 0.0;
    for (int64_t j = 0; j < p->c; j++) s += exp(y[j] - m);
    *max = m;
    *logs = log(s);
}

static double ref_w(const float *w, int64_t j) { return w ? (double)w[j] : 1.0; }

typedef struct train_job {
    const xent_problem *p;
    const void *logits, *targets;
    const float *weights, *dloss;
    double *loss, *lse, *grad;
    int64_t grad_step, rows_per_chunk;
    double W, denom;
    double *totals;  /* a chunk's sum of row losses */
    double *scratch; /* c doubles a thread: the row as the softmax sees it */
} train_job;

/* Row i's gradient, into its place among the compared rows: y the row as the
 * softmax sees it, l its log-sum-exp. */
static void train_grad(const train_job *jb, int64_t i, const double *y, double l, int64_t t, int ignored, int bad) {
    const xent_problem *p = jb->p;
    const double eps = p->label_smoothing, C = (double)p->c;
    double *gi = jb->grad + i / jb->grad_step * p->c;
    double f = jb->dloss ? (double)jb->dloss[p->reduction == XENT_REDUCE_NONE ? i : 0] : 1.0;
    if (p->reduction == XENT_REDUCE_MEAN) f /= jb->denom;
    const double wt = ignored || bad ? 0.0 : ref_w(jb->weights, t);
    const double A = (1.0 - eps) * wt + eps / C * jb->W + 2.0 * p->z_loss * l;
    for (int64_t j = 0; j < p->c; j++) {
        double g = A * exp(y[j] - l) - (j == t ? (1.0 - eps) * wt : 0.0) - eps / C * ref_w(jb->weights, j);
        if (p->softcap > 0.0f) {
            double u = y[j] / (double)p->softcap;
            g *= 1.0 - u * u;
        }
        gi[j] = ignored ? 0.0 : bad ? NAN : f * g;
    }
}

/* Row i's loss (returned), its lse and, on a compared row, its gradient. */
static double train_row(const train_job *jb, int64_t i, double *y) {
    const xent_problem *p = jb->p;
    const double eps = p->label_smoothing;
    double m, logs, row = 0.0;
    const int64_t t = ref_tgt(p, jb->targets, i);
    const int ignored = t == p->ignore_index, bad = !ignored && (t < 0 || t >= p->c);
    ref_capped_row(p, jb->logits, i, y, &m, &logs);
    const double l = m + logs;
    if (jb->lse) jb->lse[i] = l;
    if (bad)
        row = NAN;
    else if (!ignored) {
        row = (1.0 - eps) * ref_w(jb->weights, t) * (logs - (y[t] - m));
        if (eps > 0.0) {
            double smooth = 0.0;
            for (int64_t j = 0; j < p->c; j++) smooth += ref_w(jb->weights, j) * (logs - (y[j] - m));
            row += eps / (double)p->c * smooth;
        }
        row += p->z_loss * l * l;
    }
    if (p->reduction == XENT_REDUCE_NONE) jb->loss[i] = row;
    if (jb->grad && i % jb->grad_step == 0) train_grad(jb, i, y, l, t, ignored, bad);
    return row;
}

static void train_chunk(void *arg, int64_t k, int thread) {
    train_job *jb = arg;
    const int64_t lo = k * jb->rows_per_chunk,
                  hi = lo + jb->rows_per_chunk < jb->p->n ? lo + jb->rows_per_chunk : jb->p->n;
    double total = 0.0;
    for (int64_t i = lo; i < hi; i++) total += train_row(jb, i, jb->scratch + (size_t)thread * (size_t)jb->p->c);
    jb->totals[k] = total;
}

int xent_ref_train(const xent_problem *p, const void *logits, const void *targets, const float *weights,
                   const float *dloss, double *loss, double *lse, double *grad, int64_t grad_step) {
    if (!p || !logits || !targets || !loss || p->n < 1 || p->c < 1 || p->row_stride < p->c || grad_step < 1 ||
        (p->has_weights != 0) != (weights != NULL))
        return XENT_EINVAL;
    train_job jb = {p, logits, targets, weights, dloss, loss, lse, grad, grad_step, 0, 0.0, 0.0, NULL, NULL};
    for (int64_t j = 0; j < p->c; j++) jb.W += ref_w(weights, j);
    for (int64_t i = 0; i < p->n; i++) {
        int64_t t = ref_tgt(p, targets, i);
        if (t != p->ignore_index && t >= 0 && t < p->c) jb.denom += ref_w(weights, t);
    }
    jb.rows_per_chunk = tune_rows_per_chunk(p->c);
    const int64_t nchunks = (p->n + jb.rows_per_chunk - 1) / jb.rows_per_chunk;
    int nthr = tune_work_threads(p->n * p->c, nchunks);
    jb.totals = malloc((size_t)nchunks * sizeof *jb.totals);
    jb.scratch = jb.totals ? tune_alloc_scratch(p->c, &nthr) : NULL;
    if (!jb.scratch) {
        free(jb.totals);
        return XENT_ENOMEM;
    }
    tune_parallel(nchunks, nthr, train_chunk, &jb);
    double total = 0.0;
    for (int64_t k = 0; k < nchunks; k++) total += jb.totals[k];
    if (p->reduction == XENT_REDUCE_SUM)
        loss[0] = total;
    else if (p->reduction == XENT_REDUCE_MEAN)
        loss[0] = jb.denom == 0.0 ? NAN : total / jb.denom;
    free(jb.scratch);
    free(jb.totals);
    return XENT_OK;
}
