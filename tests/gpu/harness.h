/* harness.h — check_gpu's one check: a spec (problem, options, inputs
 * distribution, how to launch), its inputs generated in parallel, the float64
 * reference, the launches through the library, and the comparison of every
 * output (guard floats after each buffer must stay poisoned). A suite runs
 * checks as rows of its tables through run_check; the counters shared with
 * the parent process are S, the context and driver G. */
#ifndef XENT_TESTS_GPU_HARNESS_H
#define XENT_TESTS_GPU_HARNESS_H

#define TOL 1e-5
#define GUARD 64           /* poisoned floats after each output buffer */
#define POISON 0xFFFFFFFFu /* a NaN */

/* ------------------------------------------------------------------------ */
/* Shared state: tests run in forked children, the summary is printed by    */
/* the parent, so the counters live in a MAP_SHARED page.                   */
/* ------------------------------------------------------------------------ */

typedef struct stats {
    uint64_t seed;
    uint64_t seq;        /* checks drawn so far: one seed each */
    long checks, failed; /* all checks */
    long shape_checks, matrix_checks;
    int shapes_run;
    double maxerr[3];  /* per logits dtype: scalar or norm-wise rel err */
    double maxelem[3]; /* per logits dtype: worst per-element err / bound scale */
    long cfg_total, cfg_run, cfg_failed, cfg_compile_failed;
    int sweep_not_run; /* dtypes left out by XENT_TEST_SWEEP_DTYPES */
    long cfg_spilled;  /* compiled configs whose ptxas report shows spills */
    double sweep_compile_s, sweep_run_s;
    int timed;
    double t_b2b_us, t_single_us;
    char tdesc[512];
} stats;

static stats *S;

static struct {
    xent_context *ctx;
    const xent_driver *drv;
    int pushed;
    CUstream stream; /* a non-blocking stream; checks alternate it with NULL */
    int ordinal;
} G;

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (G.drv && G.drv->GetErrorName) G.drv->GetErrorName(r, &s);
    return s ? s : "?";
}

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        CUresult r_ = (call);                                                                                          \
        ck_assert_msg(r_ == CUDA_SUCCESS, "%s failed: %s (%d)", #call, cu_err(r_), (int)r_);                           \
    } while (0)

static int ncpus(void) {
    const char *e = getenv("XENT_TEST_JOBS");
    long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    return (int)n;
}

/* ------------------------------------------------------------------------ */
/* One check: its description, inputs, reference, launches and comparison. */
/* ------------------------------------------------------------------------ */

enum dist { DIST_NORMAL, DIST_UNIFORM, DIST_PEAKY };

typedef struct spec {
    const char *label;    /* the test it belongs to */
    int64_t n, c, stride; /* stride 0: c */
    int off;              /* logits pointer offset in elements (unaligned rows) */
    xent_dtype dt;
    xent_index it;
    xent_reduction red;
    int64_t ignore_index;
    double p_ignore; /* probability that a row's target is ignore_index */
    float smoothing;
    int weights, lse;
    int woff; /* weights pointer offset in floats: 1 puts them off 16 bytes (their per-class loads) */
    int dist;
    float scale, offset, jitter; /* x = offset + jitter * N(row) + scale * N */
    int use_stream;              /* launch on G.stream instead of the legacy stream */
    int own_ws;                  /* pass a caller workspace (and check it is left zeroed) */
    int repeat;                  /* extra launches that must be bitwise equal */
    int bad;                     /* rows given a bad target (c, -5, huge) */
    const xent_config *cfg;      /* explicit config (xent_plan_build) or NULL (xent_plan_get) */
    int quiet;                   /* don't print per-failure detail beyond the first lines */
} spec;

static void spec_init(spec *sp, const char *label, int64_t n, int64_t c) {
    xent_problem defaults; /* PyTorch's, as the library states them */
    xent_problem_init(&defaults, n, c);
    memset(sp, 0, sizeof *sp);
    sp->label = label;
    sp->n = n;
    sp->c = c;
    sp->dt = defaults.logits;
    sp->it = defaults.targets;
    sp->red = defaults.reduction;
    sp->ignore_index = defaults.ignore_index;
    sp->dist = DIST_NORMAL;
    sp->scale = 1.0f;
    sp->repeat = 1;
}

static const char *dt_name(xent_dtype d) { return d == XENT_F32 ? "f32" : d == XENT_F16 ? "f16" : "bf16"; }
static const char *it_name(xent_index i) { return i == XENT_I32 ? "i32" : "i64"; }
static const char *red_name(xent_reduction r) {
    return r == XENT_REDUCE_NONE ? "none" : r == XENT_REDUCE_SUM ? "sum" : "mean";
}

static void spec_describe(const spec *sp, uint64_t seed, char *buf, size_t len) {
    snprintf(buf, len,
             "[%s] %" PRId64 "x%" PRId64 " stride=%" PRId64 " off=%d %s/%s %s w=%d woff=%d ls=%g lse=%d "
             "ignore=%" PRId64 " p_ign=%g bad=%d dist=%d scale=%g offset=%g jitter=%g stream=%d ws=%d seed=%016" PRIx64,
             sp->label, sp->n, sp->c, sp->stride ? sp->stride : sp->c, sp->off, dt_name(sp->dt), it_name(sp->it),
             red_name(sp->red), sp->weights, sp->woff, (double)sp->smoothing, sp->lse, sp->ignore_index, sp->p_ignore,
             sp->bad, sp->dist, (double)sp->scale, (double)sp->offset, (double)sp->jitter, sp->use_stream, sp->own_ws,
             seed);
}

static void spec_problem(const spec *sp, xent_problem *p) {
    xent_problem_init(p, sp->n, sp->c);
    p->row_stride = sp->stride ? sp->stride : sp->c;
    p->logits = sp->dt;
    p->targets = sp->it;
    p->reduction = sp->red;
    p->ignore_index = sp->ignore_index;
    p->label_smoothing = sp->smoothing;
    p->has_weights = sp->weights;
    p->write_lse = sp->lse;
}

/* A config from "NAME=VALUE ..." text: knobs not named take their first
 * legal value (so the lists below survive knobs added later). Returns 1 when
 * the result is legal for p's dtype and fits p; else writes why. */
static int make_config(const char *text, const xent_problem *p, xent_config *cfg, char *why, size_t len) {
    memset(cfg, 0, sizeof *cfg);
    for (int k = 0; k < xent_nknobs; k++) xent_knob_set(cfg, &xent_knobs[k], xent_knobs[k].values[0]);
    const char *t = text;
    while (*t) {
        while (*t == ' ') t++;
        if (!*t) break;
        const char *eq = strchr(t, '=');
        ck_assert_msg(eq != NULL, "config text '%s'", text);
        const xent_knob *kn = NULL;
        for (int k = 0; k < xent_nknobs; k++)
            if (strlen(xent_knobs[k].name) == (size_t)(eq - t) && !strncmp(xent_knobs[k].name, t, (size_t)(eq - t)))
                kn = &xent_knobs[k];
        if (!kn) {
            snprintf(why, len, "unknown knob '%.*s'", (int)(eq - t), t);
            return 0;
        }
        char *end;
        xent_knob_set(cfg, kn, (int)strtol(eq + 1, &end, 10));
        t = end;
    }
    return xent_config_fits(cfg, p, why, len);
}

/* --- parallel logits generation ---------------------------------------- */

typedef struct gen_part {
    const spec *sp;
    void *logits; /* compact n x c */
    const int64_t *targets;
    uint64_t seed;
    int64_t r0, r1;
} gen_part;

static inline void store(void *base, xent_dtype dt, int64_t k, float v) {
    if (dt == XENT_F32)
        ((float *)base)[k] = v;
    else if (dt == XENT_F16)
        ((uint16_t *)base)[k] = xent_float_to_half(v);
    else
        ((uint16_t *)base)[k] = xent_float_to_bf16(v);
}

static void *gen_rows(void *arg) {
    gen_part *g = arg;
    const spec *sp = g->sp;
    const int64_t c = sp->c;
    for (int64_t i = g->r0; i < g->r1; i++) {
        uint64_t s = mix64(g->seed, (uint64_t)i);
        int64_t k0 = i * c;
        if (sp->dist == DIST_UNIFORM) { /* torch.rand, as KernelBench's problem 95 */
            for (int64_t j = 0; j < c; j++) store(g->logits, sp->dt, k0 + j, (float)urand(&s));
            continue;
        }
        double off = sp->offset + sp->jitter * nrand(&s);
        int64_t peak = -1;
        double boost = 0.0;
        if (sp->dist == DIST_PEAKY) { /* one dominant class, half the time the target: tiny losses */
            int64_t t = g->targets[i];
            peak = (urand(&s) < 0.5 && t >= 0 && t < c) ? t : (int64_t)rand_below(&s, (uint64_t)c);
            boost = 5.0 + 10.0 * urand(&s);
        }
        for (int64_t j = 0; j < c; j++) {
            double v = off + sp->scale * nrand(&s);
            if (j == peak) v += boost;
            store(g->logits, sp->dt, k0 + j, (float)v);
        }
    }
    return NULL;
}

static void gen_logits(const spec *sp, void *logits, const int64_t *targets, uint64_t seed) {
    int64_t work = sp->n * sp->c;
    int nt = (int)(work / (1 << 20)) + 1;
    if (nt > ncpus()) nt = ncpus();
    if (nt > sp->n) nt = (int)sp->n;
    gen_part parts[64];
    pthread_t tid[64];
    int started[64] = {0};
    for (int k = 0; k < nt; k++) {
        parts[k] = (gen_part){sp, logits, targets, seed, sp->n * k / nt, sp->n * (k + 1) / nt};
        if (k > 0) started[k] = pthread_create(&tid[k], NULL, gen_rows, &parts[k]) == 0;
    }
    gen_rows(&parts[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            gen_rows(&parts[k]);
    }
}

/* --- comparisons ---------------------------------------------------------- */

/* An element against its reference with bound TOL * scale; NaN only matches NaN. */
static int elem_ok(float a, double b, double scale, double *norm_err) {
    if (isnan(b) || isnan(a)) {
        *norm_err = (isnan(a) && isnan(b)) ? 0.0 : INFINITY;
        return isnan(a) && isnan(b);
    }
    if (isinf(b) || isinf(a)) {
        *norm_err = (double)a == b ? 0.0 : INFINITY;
        return (double)a == b;
    }
    *norm_err = fabs((double)a - b) / scale;
    return fabs((double)a - b) <= TOL * scale;
}

static int guard_ok(const float *g) {
    for (int k = 0; k < GUARD; k++) {
        uint32_t u;
        memcpy(&u, &g[k], 4);
        if (u != POISON) return 0;
    }
    return 1;
}

static void note_err(xent_dtype dt, double rel, double elem) {
    if (rel >= 0.0 || isnan(rel))
        if (!(rel <= S->maxerr[dt])) S->maxerr[dt] = rel; /* NaN/inf propagate */
    if (!(elem <= S->maxelem[dt])) S->maxelem[dt] = elem;
}

/* The error budget of row i (see the header): |loss_i| or, when larger, the
 * magnitude the loss is formed from (lse), times the row's weight. */
static double row_scale(const spec *sp, const float *w, int64_t t, double loss, double lse) {
    double wt = w && t >= 0 && t < sp->c ? (double)w[t] : 1.0;
    double l = isfinite(lse) ? fabs(lse) : 0.0;
    return fmax(isfinite(loss) ? fabs(loss) : 0.0, fmax(wt, 1.0) * fmax(l, 1.0));
}

/* Compare one launch's outputs; prints what is wrong; returns 1 when all is right.
 * rows: per-row reference losses (== ref for reduction none). */
static int compare(const spec *sp, const char *desc, const char *plan_desc, const int64_t *t64, const float *w,
                   const float *out, const float *lse, const double *ref, const double *rows, const double *ref_lse) {
    const int64_t n = sp->n;
    int ok = 1, shown = 0;
    const int maxshow = sp->quiet ? 2 : 8;
    double worst = 0.0, rel = -1.0; /* rel < 0: no well-conditioned plain relative error to report */
#define COMPLAIN(...)                                                                                                  \
    do {                                                                                                               \
        if (ok) fprintf(stderr, "FAIL %s\n     plan: %s\n", desc, plan_desc);                                          \
        ok = 0;                                                                                                        \
        if (shown++ < maxshow) fprintf(stderr, "     " __VA_ARGS__);                                                   \
    } while (0)
    int64_t nout = sp->red == XENT_REDUCE_NONE ? n : 1;
    if (!guard_ok(out + nout)) COMPLAIN("loss: a guard float after the output was overwritten\n");
    double budget = 0.0, wsum = 0.0, ref_norm = 0.0, scale_norm = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t64[i];
        if (t == sp->ignore_index) {
            if (sp->red == XENT_REDUCE_NONE && !(out[i] == 0.0f))
                COMPLAIN("row %" PRId64 ": ignored row has loss %.9g, not 0\n", i, (double)out[i]);
            continue;
        }
        const double scale = row_scale(sp, w, t, rows[i], ref_lse[i]);
        if (t >= 0 && t < sp->c) {
            /* the nll term scales with w[t]; the smoothing term does not vanish with it */
            budget += ((w ? (double)w[t] : 1.0) + (double)sp->smoothing) * scale;
            wsum += w ? (double)w[t] : 1.0;
        }
        if (sp->red != XENT_REDUCE_NONE) continue;
        double e;
        if (!elem_ok(out[i], ref[i], scale, &e))
            COMPLAIN("row %" PRId64 ": loss %.9g, reference %.12g (target %" PRId64 ", lse %.9g, bound %.3g)\n", i,
                     (double)out[i], ref[i], t, ref_lse[i], TOL * scale);
        if (!(e <= worst)) worst = e;
        if (isfinite(ref[i])) {
            ref_norm += ref[i] * ref[i];
            scale_norm += scale * scale;
        }
    }
    if (sp->red == XENT_REDUCE_NONE) {
        /* reported, not required (the per-element bounds imply the norm-wise one
         * with the same scales); only where the losses are not all cancellation */
        if (ref_norm >= 1e-4 * scale_norm && ref_norm > 0) rel = xent_rel_err_vec(out, ref, n);
    } else {
        /* the sum of the rows' budgets (over the weight sum for mean): for typical
         * rows |lse| ~ loss and this is the plain relative error */
        double bound = sp->red == XENT_REDUCE_MEAN ? (wsum > 0 ? budget / wsum : 1.0) : fmax(budget, 1e-30);
        double e;
        if (!elem_ok(out[0], ref[0], bound, &e))
            COMPLAIN("%s: %.9g, reference %.12g, error %.3e > %.0e x %.4g (relative error %.3e)\n", red_name(sp->red),
                     (double)out[0], ref[0], fabs((double)out[0] - ref[0]), TOL, bound,
                     xent_rel_err((double)out[0], ref[0]));
        worst = e;
        if (isfinite(ref[0]) && fabs(ref[0]) >= 1e-2 * bound) rel = xent_rel_err((double)out[0], ref[0]);
    }
    if (sp->lse) {
        if (!guard_ok(lse + n)) COMPLAIN("lse: a guard float after the output was overwritten\n");
        for (int64_t i = 0; i < n; i++) {
            double e;
            if (!elem_ok(lse[i], ref_lse[i], fmax(fabs(ref_lse[i]), 1.0), &e))
                COMPLAIN("row %" PRId64 ": lse %.9g, reference %.12g\n", i, (double)lse[i], ref_lse[i]);
            if (!(e <= worst)) worst = e;
        }
        double r2 = xent_rel_err_vec(lse, ref_lse, n);
        if (!(r2 <= TOL)) COMPLAIN("lse: norm-wise relative error %.3e > %.0e\n", r2, TOL);
        if (!(r2 <= rel)) rel = r2;
    }
    note_err(sp->dt, rel, worst);
    if (!ok && shown > maxshow) fprintf(stderr, "     ... %d problems in all\n", shown);
#undef COMPLAIN
    return ok;
}

/* --- device helpers ---------------------------------------------------------- */

static CUdeviceptr dalloc(size_t bytes) {
    CUdeviceptr p = 0;
    CU(G.drv->MemAlloc(&p, bytes ? bytes : 4));
    return p;
}

static void dfree(CUdeviceptr p) {
    if (p) G.drv->MemFree(p);
}

/* Logits onto the device at row_stride, the pointer offset by sp->off
 * elements; everything that is not a logit (padding, the offset) is NaN. */
static CUdeviceptr upload_logits(const spec *sp, const void *host, size_t *bytes_out) {
    const int64_t n = sp->n, c = sp->c, stride = sp->stride ? sp->stride : c;
    const size_t es = (size_t)xent_dtype_size(sp->dt);
    const size_t elems = (size_t)sp->off + (size_t)(n - 1) * (size_t)stride + (size_t)c;
    const size_t bytes = elems * es;
    CUdeviceptr d = dalloc(bytes);
    *bytes_out = bytes;
    CUdeviceptr d0 = d + (CUdeviceptr)((size_t)sp->off * es);
    if (stride == c) {
        if (sp->off) CU(G.drv->MemsetD8(d, 0xFF, bytes));
        CU(G.drv->MemcpyHtoD(d0, host, (size_t)n * (size_t)c * es));
        return d;
    }
    CU(G.drv->MemsetD8(d, 0xFF, bytes));
    size_t span = (size_t)(n - 1) * (size_t)stride * es + (size_t)c * es;
    unsigned char *stage = span <= ((size_t)512 << 20) ? malloc(span) : NULL;
    if (stage) { /* one copy of a strided, NaN-padded host image */
        memset(stage, 0xFF, span);
        for (int64_t i = 0; i < n; i++)
            memcpy(stage + (size_t)i * (size_t)stride * es, (const unsigned char *)host + (size_t)i * (size_t)c * es,
                   (size_t)c * es);
        CU(G.drv->MemcpyHtoD(d0, stage, span));
        free(stage);
    } else {
        for (int64_t i = 0; i < n; i++)
            CU(G.drv->MemcpyHtoD(d0 + (CUdeviceptr)((size_t)i * (size_t)stride * es),
                                 (const unsigned char *)host + (size_t)i * (size_t)c * es, (size_t)c * es));
    }
    return d;
}

/* The counters the kernel must leave zeroed: the last-block ticket and, for
 * split rows, the per-row arrival counts (template header, "Workspace"). */
static int workspace_zeroed(const xent_plan *plan, CUdeviceptr ws, char *why, size_t len) {
    uint32_t ticket = 1;
    CU(G.drv->MemcpyDtoH(&ticket, ws, 4));
    if (ticket) {
        snprintf(why, len, "workspace ticket is %u after the launch, not 0", ticket);
        return 0;
    }
    if (plan->config.split > 1) {
        const int64_t n = plan->problem.n;
        int32_t *arr = malloc((size_t)n * 4);
        ck_assert_ptr_nonnull(arr);
        CU(G.drv->MemcpyDtoH(arr, ws + 16 + 16 * (CUdeviceptr)plan->grid, (size_t)n * 4));
        for (int64_t i = 0; i < n; i++)
            if (arr[i]) {
                snprintf(why, len, "workspace arrival count of row %" PRId64 " is %d after the launch", i, arr[i]);
                free(arr);
                return 0;
            }
        free(arr);
    }
    return 1;
}

/* Run one check; returns 1 when it passed. Counted in S. */
static int run_check(const spec *sp) {
    const int64_t n = sp->n, c = sp->c;
    const uint64_t seed = mix64(S->seed, ++S->seq);
    char desc[768], plan_desc[512] = "(no plan)", why[256];
    spec_describe(sp, seed, desc, sizeof desc);
    S->checks++;

    xent_problem p;
    spec_problem(sp, &p);
    ck_assert_msg(xent_problem_check(&p, why, sizeof why) == XENT_OK, "%s: bad problem: %s", desc, why);

    /* host inputs */
    const size_t es = (size_t)xent_dtype_size(sp->dt);
    const int64_t nout = sp->red == XENT_REDUCE_NONE ? n : 1;
    int64_t *t64 = malloc((size_t)n * sizeof *t64);
    void *tgt = malloc((size_t)n * (sp->it == XENT_I64 ? 8 : 4));
    void *logits = malloc((size_t)n * (size_t)c * es);
    float *w = sp->weights ? malloc((size_t)c * sizeof *w) : NULL;
    double *ref = malloc((size_t)nout * sizeof *ref), *ref_lse = malloc((size_t)n * sizeof *ref_lse);
    float *out[2], *lse[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        out[k] = malloc((size_t)(nout + GUARD) * sizeof(float));
        if (sp->lse) lse[k] = malloc((size_t)(n + GUARD) * sizeof(float));
        ck_assert(out[k] && (!sp->lse || lse[k]));
    }
    ck_assert_msg(t64 && tgt && logits && (!sp->weights || w) && ref && ref_lse, "%s: host memory", desc);

    uint64_t s = mix64(seed, 0x7a76e7);
    for (int64_t i = 0; i < n; i++)
        t64[i] = urand(&s) < sp->p_ignore ? sp->ignore_index : (int64_t)rand_below(&s, (uint64_t)c);
    for (int k = 0; k < sp->bad && k < n; k++) { /* distinct rows, spread out */
        int64_t i = (int64_t)(((uint64_t)k * (uint64_t)n) / (uint64_t)sp->bad) +
                    (int64_t)rand_below(&s, (uint64_t)(n / sp->bad));
        if (i >= n) i = n - 1;
        const int64_t huge = sp->it == XENT_I32 ? INT32_MAX : (int64_t)1 << 40;
        const int64_t cand[3] = {c, -5, k % 2 ? huge : -huge};
        int64_t v = cand[k % 3];
        if (v == sp->ignore_index) v = c + 1;
        t64[i] = v;
    }
    for (int64_t i = 0; i < n; i++) {
        if (sp->it == XENT_I64)
            ((int64_t *)tgt)[i] = t64[i];
        else
            ((int32_t *)tgt)[i] = (int32_t)t64[i];
    }
    if (w)
        for (int64_t j = 0; j < c; j++) w[j] = urand(&s) < 0.05 ? 0.0f : (float)(0.1 + 1.9 * urand(&s));
    gen_logits(sp, logits, t64, seed);

    /* the float64 reference, on the same (16-bit) values, compact rows */
    xent_problem pc = p;
    pc.row_stride = c;
    int64_t bad_rows = -1;
    int rc = xent_ref_forward(&pc, logits, tgt, w, ref, ref_lse, &bad_rows);
    ck_assert_msg(rc == XENT_OK, "%s: xent_ref_forward: %s", desc, xent_errstr(rc));
    double *rows = ref; /* per-row reference losses: the error budget of sum and mean */
    if (sp->red != XENT_REDUCE_NONE) {
        xent_problem pn = pc;
        pn.reduction = XENT_REDUCE_NONE;
        rows = malloc((size_t)n * sizeof *rows);
        ck_assert_ptr_nonnull(rows);
        ck_assert_int_eq(xent_ref_forward(&pn, logits, tgt, w, rows, NULL, NULL), XENT_OK);
    }
    int64_t want_bad = 0;
    for (int64_t i = 0; i < n; i++) want_bad += t64[i] != sp->ignore_index && (t64[i] < 0 || t64[i] >= c);
    ck_assert_msg(bad_rows == want_bad, "%s: reference counted %" PRId64 " bad rows, %" PRId64 " were made", desc,
                  bad_rows, want_bad);

    int pass = 1;
    xent_plan *plan = NULL;
    CUdeviceptr dlog = 0, dtgt = 0, dw = 0, dloss = 0, dlse = 0, dws = 0;
    size_t logit_bytes = 0;
    CUstream st = sp->use_stream ? G.stream : NULL;

    rc = sp->cfg ? xent_plan_build(G.ctx, &p, sp->cfg, XENT_SOURCE_EXPLICIT, &plan) : xent_plan_get(G.ctx, &p, &plan);
    if (rc != XENT_OK) {
        fprintf(stderr, "FAIL %s\n     plan: %s: %s\n", desc, xent_errstr(rc), xent_errmsg(G.ctx));
        pass = 0;
        goto done;
    }
    xent_plan_describe(plan, plan_desc, sizeof plan_desc);

    dlog = upload_logits(sp, logits, &logit_bytes);
    dtgt = dalloc((size_t)n * (sp->it == XENT_I64 ? 8 : 4));
    CU(G.drv->MemcpyHtoD(dtgt, tgt, (size_t)n * (sp->it == XENT_I64 ? 8 : 4)));
    if (w) {
        dw = dalloc((size_t)(c + sp->woff) * 4);
        CU(G.drv->MemcpyHtoD(dw + (CUdeviceptr)sp->woff * 4, w, (size_t)c * 4));
    }
    dloss = dalloc((size_t)(nout + GUARD) * 4);
    if (sp->lse) dlse = dalloc((size_t)(n + GUARD) * 4);
    if (sp->own_ws) {
        size_t wsb = xent_workspace_size(plan);
        ck_assert_msg(wsb >= 16, "%s: workspace size %zu", desc, wsb);
        dws = dalloc(wsb);
        CU(G.drv->MemsetD8(dws, 0, wsb));
    }
    /* Synchronous copies and memsets may still be in flight on the legacy
     * stream, which a non-blocking stream does not wait for. */
    CU(G.drv->StreamSynchronize(NULL));

    xent_args a;
    memset(&a, 0, sizeof a);
    a.logits = (const void *)(uintptr_t)(dlog + (CUdeviceptr)((size_t)sp->off * es));
    a.targets = (const void *)(uintptr_t)dtgt;
    a.weights = dw ? (const float *)(uintptr_t)(dw + (CUdeviceptr)sp->woff * 4) : NULL;
    a.loss = (float *)(uintptr_t)dloss;
    a.lse = (float *)(uintptr_t)dlse;
    a.workspace = (void *)(uintptr_t)dws;

    const int want_rc = want_bad ? XENT_EBADTARGET : XENT_OK;
    for (int k = 0; k <= sp->repeat && pass; k++) {
        const int slot = k ? 1 : 0;
        CU(G.drv->MemsetD8Async(dloss, 0xFF, (size_t)(nout + GUARD) * 4, st));
        if (dlse) CU(G.drv->MemsetD8Async(dlse, 0xFF, (size_t)(n + GUARD) * 4, st));
        /* explicit configs launch their plan; the others go through xent_forward (the memo) */
        rc = sp->cfg ? xent_plan_launch(plan, st, &a) : xent_forward(G.ctx, &p, &a, st);
        if (rc != XENT_OK) {
            fprintf(stderr, "FAIL %s\n     plan: %s\n     launch %d: %s: %s\n", desc, plan_desc, k, xent_errstr(rc),
                    xent_errmsg(G.ctx));
            pass = 0;
            break;
        }
        rc = xent_check_targets(G.ctx, st);
        if (rc != want_rc) {
            fprintf(stderr, "FAIL %s\n     plan: %s\n     launch %d: xent_check_targets gave %s (%s), expected %s\n",
                    desc, plan_desc, k, xent_errstr(rc), xent_errmsg(G.ctx), xent_errstr(want_rc));
            pass = 0;
            break;
        }
        if (want_bad && (rc = xent_check_targets(G.ctx, st)) != XENT_OK) { /* the flag is cleared */
            fprintf(stderr, "FAIL %s\n     plan: %s\n     a second xent_check_targets gave %s, not OK\n", desc,
                    plan_desc, xent_errstr(rc));
            pass = 0;
            break;
        }
        CU(G.drv->MemcpyDtoH(out[slot], dloss, (size_t)(nout + GUARD) * 4));
        if (dlse) CU(G.drv->MemcpyDtoH(lse[slot], dlse, (size_t)(n + GUARD) * 4));
        if (dws && !workspace_zeroed(plan, dws, why, sizeof why)) {
            fprintf(stderr, "FAIL %s\n     plan: %s\n     launch %d: %s\n", desc, plan_desc, k, why);
            pass = 0;
            break;
        }
        if (k == 0) {
            pass = compare(sp, desc, plan_desc, t64, w, out[0], lse[0], ref, rows, ref_lse);
        } else if (memcmp(out[0], out[1], (size_t)(nout + GUARD) * 4) ||
                   (sp->lse && memcmp(lse[0], lse[1], (size_t)(n + GUARD) * 4))) {
            int64_t i = 0;
            while (i < nout && !memcmp(&out[0][i], &out[1][i], 4)) i++;
            fprintf(stderr,
                    "FAIL %s\n     plan: %s\n     launch %d is not bitwise equal to launch 0 (loss[%" PRId64
                    "] %.9g vs %.9g%s)\n",
                    desc, plan_desc, k, i, i < nout ? (double)out[1][i] : 0.0, i < nout ? (double)out[0][i] : 0.0,
                    i < nout ? "" : "; lse differs");
            pass = 0;
        }
    }

done:
    dfree(dlog);
    dfree(dtgt);
    dfree(dw);
    dfree(dloss);
    dfree(dlse);
    dfree(dws);
    if (sp->cfg && plan) xent_plan_destroy(plan);
    free(t64);
    free(tgt);
    free(logits);
    free(w);
    if (rows != ref) free(rows);
    free(ref);
    free(ref_lse);
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        free(lse[k]);
    }
    if (!pass) S->failed++;
    return pass;
}

#endif
