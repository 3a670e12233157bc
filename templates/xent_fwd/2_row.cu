/* xent_fwd, part 2: the row path. A team's rows cut into chunks of vectors and scalars,
 * their max and sum of exponentials (online or in two passes), and a row's loss. */

/* Where a row's elements lie: `head` scalars before the first aligned vector,
 * nv vectors, then the tail scalars up to c. */
struct row_layout {
    const unsigned char *p;
    int head, nv;
};

__device__ __forceinline__ row_layout layout(const unsigned char *logits, long long row,
                                             long long stride, int c) {
    row_layout l;
    l.p = logits + (size_t)row * (size_t)stride * ESIZE;
    int mis = (int)(((size_t)l.p / ESIZE) % XENT_VEC);
    l.head = mis ? min(XENT_VEC - mis, c) : 0;
    l.nv = (c - l.head) / XENT_VEC;
    return l;
}

__device__ __forceinline__ const unsigned char *vec_addr(const row_layout &l, int v) {
    return l.p + (size_t)(l.head + v * XENT_VEC) * ESIZE;
}

/* Load the (up to) ITEMS vectors of this lane in chunk vb; missing ones read as -inf.
 * Addresses are one base plus constant offsets, so they cost no registers.
 * The first `sure` items (a constant) are known to be there: no test, no fill;
 * so are all of a chunk that ends inside the segment (the usual one: a test
 * per chunk, uniform in the team, where the fills took one move per word). */
__device__ __forceinline__ void load_chunk(const row_layout &l, int vb, int v1, int lane,
                                           unsigned (&r)[XENT_ITEMS][VWORDS], int sure = 0) {
    const unsigned char *base = vec_addr(l, vb + lane);
    const int valid = v1 - (vb + lane);
    if (vb + CHUNK <= v1) {
#pragma unroll
        for (int k = 0; k < ITEMS_LIVE; k++) load_vec(base + k * XENT_TPR * XENT_VEC * ESIZE, r[k]);
        return;
    }
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++) {
        if (k < sure || k * XENT_TPR < valid) {
            load_vec(base + k * XENT_TPR * XENT_VEC * ESIZE, r[k]);
        } else {
#pragma unroll
            for (int q = 0; q < VWORDS; q++) r[k][q] = NEG_INF_WORD;
        }
    }
}

__device__ __forceinline__ float chunk_max(const unsigned (&r)[XENT_ITEMS][VWORDS]) {
#if XENT_LOGIT == 0 || __CUDA_ARCH__ < 800 /* max.f16x2 and max.bf16x2 came with sm_80 */
    float m = neg_inf();
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++)
#pragma unroll
        for (int e = 0; e < XENT_VEC; e++) m = fmaxf(m, elem(r[k], e));
    return m;
#else
    /* 16-bit pairs stay packed: half the instructions, and the registers
     * hold the chunk as loaded rather than widened */
#if ITEMS_LIVE == 0 /* rows shorter than a vector: all scalars */
    (void)r;
    return neg_inf();
#else
    unsigned m2 = r[0][0];
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++) /* the items past ITEMS_LIVE are never loaded */
#pragma unroll
        for (int q = 0; q < VWORDS; q++)
            if (k || q) m2 = max_pair(m2, r[k][q]);
    return fmaxf(widen16((unsigned short)(m2 & 0xffffu)), widen16((unsigned short)(m2 >> 16)));
#endif
#endif
}

/* Element i (item i / VEC, element i % VEC) of a loaded chunk, i < ITEMS_LIVE * VEC.
 * Registers cannot be indexed (that would go through local memory), so this
 * is a select tree on the bits of the word index: ITEMS_LIVE * VWORDS - 1
 * selects, where comparing i with every element cost two instructions each. */
/* Chunks of at most this many words pick the target with a select tree. */
#define PICK_WORDS_MAX 16
#if ITEMS_LIVE > 0 && ITEMS_LIVE * VWORDS <= PICK_WORDS_MAX
__device__ __forceinline__ float pick(const unsigned (&r)[XENT_ITEMS][VWORDS], int i) {
    const int n = ITEMS_LIVE * VWORDS;
    const int word = i / (XENT_VEC / VWORDS);
    unsigned v[ITEMS_LIVE * VWORDS];
#pragma unroll
    for (int j = 0; j < n; j++) v[j] = r[j / VWORDS][j % VWORDS];
#pragma unroll
    for (int b = 0; (1 << b) < n; b++) {
        const bool hi = (word >> b) & 1;
#pragma unroll
        for (int j = 0; j + (1 << b) < n; j += 2 << b) v[j] = hi ? v[j + (1 << b)] : v[j];
    }
#if XENT_LOGIT == 0
    return __uint_as_float(v[0]);
#elif XENT_LOGIT == 1
    return widen16((unsigned short)((i & 1) ? v[0] >> 16 : v[0]));
#else
    return __uint_as_float((i & 1) ? (v[0] & 0xffff0000u) : (v[0] << 16));
#endif
}
#endif

/* Weighted smoothing loads a class weight a logit, beside the sum. Where a warp lies inside one
 * team (TPR >= 32), those loads span a lane every XENT_VEC classes and made the L1 the bound
 * (8192x32000 bf16 1.4 times as long): there a 16-bit item of eight or four logits loads its
 * weights four a load, from the 16 bytes at or below its first class, and shifts them into
 * place when its row starts off 16 bytes. Narrower teams share a warp's classes across its
 * rows, and loading the weights together was slower there (65536x1000 bf16, VEC=4 TPR=8, by
 * 13%), as it was for fp32 items (a 16384x2000 VEC=2 kernel by half). */
#define WEIGHT_VECTORS (XENT_SMOOTHING && XENT_WEIGHTS && XENT_LOGIT != 0 && XENT_VEC >= 4 && XENT_TPR >= 32)
#if WEIGHT_VECTORS
/* The weights of classes j .. j + XENT_VEC - 1, j = 4i + M, w on 16 bytes: the vectors from j - M
 * and, for M > 0, one more, whole where it ends before vend (the row's vectors' end, so inside the
 * weights), else its first M classes, which are the item's. M is a template argument: a shift
 * chosen at run time costs three selects a weight, which made aligned rows slower than a
 * kernel that never shifts. */
template <int M>
__device__ __forceinline__ void item_weights(const float *__restrict__ w, int j, int vend, float (&wv)[XENT_VEC]) {
    const float *b = w + (j - M);
    float f[XENT_VEC + 3];
#pragma unroll
    for (int e = 0; e < XENT_VEC; e += 4) {
        const float4 q = __ldg((const float4 *)(b + e));
        f[e] = q.x, f[e + 1] = q.y, f[e + 2] = q.z, f[e + 3] = q.w;
    }
    if (M > 0 && j - M + XENT_VEC + 4 <= vend) {
        const float4 q = __ldg((const float4 *)(b + XENT_VEC));
        f[XENT_VEC] = q.x, f[XENT_VEC + 1] = q.y, f[XENT_VEC + 2] = q.z;
    } else {
#pragma unroll
        for (int i = 0; i < 3; i++) f[XENT_VEC + i] = i < M ? __ldg(b + XENT_VEC + i) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < XENT_VEC; e++) wv[e] = f[e + M];
}
#endif

/* The sum of a loaded chunk's terms; the -inf the missing vectors read as add 0. */
/* With smoothing, the side sums of the valid items too, in the same pass: each
 * element is widened once and used at once, so a 16-bit chunk is never held
 * widened (a separate side loop kept the widened chunk live and spilled). */
/* WM: the items' weights come four a load from the 16 bytes WM classes below each item's first
 * (WEIGHT_VECTORS), or, at -1, a load a class; each a separate instantiation, so that the choice
 * is made once a chunk and not an element. */
template <bool FFMA, int WM>
__device__ __forceinline__ float exp_sum(const unsigned (&r)[XENT_ITEMS][VWORDS], const shift &h, acc &a,
                                         int valid, int j_lane, int vend, const float *__restrict__ w) {
    float s[2] = {0.0f, 0.0f}; /* two chains: half the dependent adds; each starts at its first term, not 0 + it */
#pragma unroll
    for (int k = 0; k < ITEMS_LIVE; k++) {
#if WEIGHT_VECTORS
        float wv[XENT_VEC];
        if (WM >= 0 && k * XENT_TPR < valid)
            item_weights<(WM < 0 ? 0 : WM)>(w, j_lane + k * XENT_TPR * XENT_VEC, vend, wv);
#endif
#pragma unroll
        for (int e = 0; e < XENT_VEC; e++) {
            const int i = k * XENT_VEC + e;
            const float v = elem(r[k], e);
            const float x = shifted_term<FFMA>(v, h, XENT_POLY && i % POLY_EVERY == POLY_EVERY - 1);
            s[i & 1] = i < 2 ? x : s[i & 1] + x;
#if WEIGHT_VECTORS
            if (WM >= 0 && k * XENT_TPR < valid) {
                a.sx = fmaf(wv[e], v, a.sx); /* as acc_side, in its order */
                a.sw += wv[e];
            }
#endif
#if XENT_SMOOTHING
            if (WM < 0 && k * XENT_TPR < valid) acc_side(a, v, j_lane + k * XENT_TPR * XENT_VEC + e, -1, w);
#endif
        }
    }
#if !XENT_SMOOTHING
    (void)a;
    (void)valid;
    (void)j_lane;
    (void)w;
#endif
#if !WEIGHT_VECTORS
    (void)vend;
#endif
    return s[0] + s[1];
}

/* The sum of exp(x - m) of a loaded chunk (a.m is the shift); the target and side sums go into a. */
__device__ __forceinline__ float chunk_sum(acc &a, const unsigned (&r)[XENT_ITEMS][VWORDS],
                                           const row_layout &l, int vb, int v1, int lane, int t,
                                           const float *__restrict__ w) {
    const float ml = safe_max(a.m);
    const int valid = v1 - (vb + lane);
    const int j_lane = l.head + (vb + lane) * XENT_VEC; /* first element of item 0 */
#if ITEMS_LIVE > 0 /* else rows shorter than a vector: all scalars */
    /* The target's owner picks it out of registers (no extra load per row), before the
     * sum widens 16-bit logits into more registers.
     * It lies d elements past this lane's first, in item q / TPR when q = d / VEC
     * is a multiple of TPR below the lane's loaded vectors (valid). */
    const unsigned d = (unsigned)(t - j_lane), q = d / XENT_VEC;
    if (d < (unsigned)(ITEMS_LIVE * XENT_TPR * XENT_VEC) && q % XENT_TPR == 0 && (int)q < valid) {
#if ITEMS_LIVE * VWORDS <= PICK_WORDS_MAX
        a.xt = pick(r, (int)(q / XENT_TPR * XENT_VEC + d % XENT_VEC));
#else
        /* a select tree over a big chunk needs half its registers again (a
         * 64-word fp32 chunk spilled at 96): compare per item instead */
        const int kt = (int)(q / XENT_TPR), et = (int)(d % XENT_VEC);
#pragma unroll
        for (int k = 0; k < ITEMS_LIVE; k++)
#pragma unroll
            for (int e = 0; e < XENT_VEC; e++)
                if (k == kt && e == et) a.xt = elem(r[k], e);
#endif
    }
#else
    (void)t;
    (void)j_lane;
    (void)valid;
#endif
    const shift h = make_shift(ml);
    const int vend = l.head + l.nv * XENT_VEC;
#define XENT_SUM(WM) (h.ffma ? exp_sum<true, WM>(r, h, a, valid, j_lane, vend, w) * h.fix \
                             : exp_sum<false, WM>(r, h, a, valid, j_lane, vend, w))
#if WEIGHT_VECTORS
    if (((size_t)w & (4 * sizeof(float) - 1)) == 0) { /* uniform: the launch's weights */
        switch (l.head & 3) { /* every item's first class lies this far past 16 bytes */
        case 0: return XENT_SUM(0);
        case 1: return XENT_SUM(1);
        case 2: return XENT_SUM(2);
        default: return XENT_SUM(3);
        }
    }
#endif
    return XENT_SUM(-1);
#undef XENT_SUM
}

/* The scalar elements (head and tail) of a row, on lanes round-robin. */
__device__ __forceinline__ float scalars_max(const row_layout &l, int c, int lane) {
    float m = neg_inf();
    for (int j = lane; j < l.head; j += XENT_TPR) m = fmaxf(m, load_scalar(l.p, j));
    for (int j = l.head + l.nv * XENT_VEC + lane; j < c; j += XENT_TPR)
        m = fmaxf(m, load_scalar(l.p, j));
    return m;
}

__device__ __forceinline__ void scalar_sum(acc &a, const row_layout &l, int j, int t,
                                           const float *__restrict__ w) {
    float x = load_scalar(l.p, j);
    a.s += exp_shifted(x, safe_max(a.m));
    acc_side(a, x, j, t, w);
}

__device__ __forceinline__ void scalars_sum(acc &a, const row_layout &l, int c, int lane, int t,
                                            const float *__restrict__ w) {
    for (int j = lane; j < l.head; j += XENT_TPR) scalar_sum(a, l, j, t, w);
    for (int j = l.head + l.nv * XENT_VEC + lane; j < c; j += XENT_TPR) scalar_sum(a, l, j, t, w);
}

/* The online pass's scalar edges (fewer than a vector at each end of the row): a lane loads its
 * edges once into registers for both their max and their sum, one round trip before the row's
 * first chunk instead of one for each. The same terms in the same order as scalars_max then
 * scalars_sum, so the result is the same bit for bit. Only a one-block launch whose rows have
 * edges takes it (XENT_EDGES_ONCE): there the round trip is most of the kernel's time, where the
 * registers and code it adds made other kernels slower, aligned one-block rows included, whose
 * edges never run (rows of 10 and 1000 16-bit classes, 4096x50257 fp32). */
#if XENT_EDGES_ONCE
#define EDGE_ITEMS (XENT_VEC > 1 ? (XENT_VEC - 1 + XENT_TPR - 1) / XENT_TPR : 1)
__device__ __forceinline__ void scalars_once(acc &a, const row_layout &l, int c, int lane, int t,
                                             const float *__restrict__ w) {
    const int tail = l.head + l.nv * XENT_VEC;
    float x[2][EDGE_ITEMS];
    float m = neg_inf();
#pragma unroll
    for (int i = 0; i < EDGE_ITEMS; i++) {
        const int jh = lane + i * XENT_TPR, jt = tail + lane + i * XENT_TPR;
        x[0][i] = jh < l.head ? load_scalar(l.p, jh) : neg_inf();
        x[1][i] = jt < c ? load_scalar(l.p, jt) : neg_inf();
    }
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int i = 0; i < EDGE_ITEMS; i++) m = fmaxf(m, x[e][i]);
    a.m = m;
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int i = 0; i < EDGE_ITEMS; i++) {
            const int j = (e ? tail : 0) + lane + i * XENT_TPR;
            if (j < (e ? c : l.head)) {
                a.s += exp_shifted(x[e][i], safe_max(a.m));
                acc_side(a, x[e][i], j, t, w);
            }
        }
}
#endif

/* One loaded chunk into the online state: rescale the sum to the new max, add. */
__device__ __forceinline__ void online_chunk(acc &a, const unsigned (&r)[XENT_ITEMS][VWORDS],
                                             const row_layout &l, int vb, int v1, int lane, int t,
                                             const float *__restrict__ w) {
    float m = fmaxf(a.m, chunk_max(r));
    a.s *= exp_shifted(a.m, safe_max(m));
    a.m = m;
    a.s += chunk_sum(a, r, l, vb, v1, lane, t, w);
}

/* This lane's share of segment [v0, v1) (vectors), plus the scalars when asked. */
__device__ __forceinline__ acc segment(const row_layout &l, int v0, int v1, bool scalars, int c,
                                       int lane, int t, const float *__restrict__ w, bool one_chunk,
                                       bool whole) {
    acc a;
    acc_init(a);
    unsigned r[XENT_ITEMS][VWORDS];
    /* one test for the usual row of aligned vectors only, not four loop checks */
    scalars = scalars && (l.head > 0 || l.head + l.nv * XENT_VEC < c);
#if XENT_PASSES == 1
    (void)one_chunk;
    (void)whole;
#if XENT_EDGES_ONCE
    if (scalars) scalars_once(a, l, c, lane, t, w);
#else
    if (scalars) {
        a.m = scalars_max(l, c, lane);
        scalars_sum(a, l, c, lane, t, w);
    }
#endif
    for (int vb = v0; vb < v1; vb += CHUNK) {
        load_chunk(l, vb, v1, lane, r);
        online_chunk(a, r, l, vb, v1, lane, t, w);
    }
#else
    float m = scalars ? scalars_max(l, c, lane) : neg_inf();
    if (one_chunk) {
        /* masked: an empty segment reads nothing; a whole row has ITEMS_SURE items */
        if (ITEMS_SURE > 0 && whole) load_chunk(l, v0, v1, lane, r, ITEMS_SURE);
        else load_chunk(l, v0, v1, lane, r);
        a.m = team_max(fmaxf(m, chunk_max(r)));
        a.s = chunk_sum(a, r, l, v0, v1, lane, t, w);
    } else {
        for (int vb = v0; vb < v1; vb += CHUNK) {
            load_chunk(l, vb, v1, lane, r);
            m = fmaxf(m, chunk_max(r));
        }
        a.m = team_max(m);
        for (int vb = v0; vb < v1; vb += CHUNK) {
            load_chunk(l, vb, v1, lane, r);
            a.s += chunk_sum(a, r, l, vb, v1, lane, t, w);
        }
    }
    if (scalars) scalars_sum(a, l, c, lane, t, w);
#endif
    return a;
}

struct row_result {
    float loss;   /* the row's loss (0 ignored, NaN bad target) */
    float weight; /* its weight in the mean's denominator */
};

__device__ __forceinline__ row_result finish_row(const acc &a, long long t, long long ignore_index,
                                                 int c, float smoothing,
                                                 const float *__restrict__ w, int *err,
                                                 float *lse_out, long long row) {
    const float log_s = log_sum(a.s);
    const float lse = a.m + log_s;
#if XENT_LSE
    lse_out[row] = lse;
#else
    (void)lse; /* smoothing may still use it */
    (void)lse_out;
    (void)row;
#endif
    row_result r;
    if (t == ignore_index) {
        r.loss = 0.0f;
        r.weight = 0.0f;
        return r;
    }
    if (t < 0 || t >= c) {
        atomicOr(err, 1);
        r.loss = __int_as_float(0x7fc00000);
        r.weight = 0.0f;
        return r;
    }
#if XENT_WEIGHTS
    float wt = __ldg(w + t);
#else
    (void)w;
    float wt = 1.0f;
#endif
    float nll = wt * ((a.m - a.xt) + log_s); /* from x - max, as log_softmax: exact for huge logits */
#if XENT_SMOOTHING
#if XENT_WEIGHTS
    float smooth = __fmul_rn(lse, a.sw) - a.sx; /* no fma: c == 1 must give exactly 0 */
#else
    float smooth = lse * (float)c - a.sx;
#endif
    r.loss = (1.0f - smoothing) * nll + (smoothing / (float)c) * smooth;
#else
    (void)smoothing;
    r.loss = nll;
#endif
    r.weight = wt;
    return r;
}

__device__ __forceinline__ target_t load_target(const target_t *targets, long long row) {
    return __ldg(targets + row);
}

