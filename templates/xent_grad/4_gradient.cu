/* xent_grad, part 4: what a row's gradient needs besides its logits, an
 * element's gradient, and its stores in the logits' type. */

/* What the gradient of a row needs besides its logits. Every element but
 * the target's takes f (A p_j - eps/C w_j); the target's is rewritten after. */
struct rowg {
    float lse;
    float lse2;  /* lse * log2e: p_j = 2^(y_j log2e - lse2) for 16-bit logits */
    float fa;    /* f A */
    float fe;    /* f eps / C (times w_j with weights) */
    float ft;    /* f (1-eps) w_t: subtracted at the target */
    long long t; /* the target's column in this slice's row, or -1 */
    float xt;    /* the target's logit, read before any gradient store (in place) */
};

/* p_j: fp32 gradients subtract first (the FFMA's rounding of lse * log2e
 * is 2^-24 |lse| relative, over fp32's own rounding at |lse| ~ 40); 16-bit
 * ones round far coarser and take the single FFMA. */
__device__ __forceinline__ float softmax_p(float y, const rowg &r, bool on_fma) {
#if XENT_LOGIT == 0
    return exp2_term((y - r.lse) * LOG2E, on_fma);
#else
    return exp2_term(fmaf(y, LOG2E, -r.lse2), on_fma);
#endif
}

/* g through the soft-capping: d(cap tanh(x / cap))/dx = 1 - (y / cap)^2. */
__device__ __forceinline__ float cap_slope(float g, float y, const gargs &k) {
#if XENT_SOFTCAP
    float u = y / k.softcap;
    g *= 1.0f - u * u;
#endif
    return g;
}

__device__ __forceinline__ float grad_of(float x, int col, const rowg &r, const gargs &k, bool on_fma = false) {
    float y = capped(x, k.softcap);
    float p = softmax_p(y, r, on_fma);
#if XENT_SMOOTHING
    float g = fmaf(r.fa, p, -r.fe * class_weight(k.weights, col));
#else
    float g = r.fa * p;
#endif
    return cap_slope(g, y, k);
}

/* The target's element: the one-hot term too. */
__device__ __forceinline__ float grad_at_target(const rowg &r, const gargs &k) {
    float y = capped(r.xt, k.softcap);
    float p = softmax_p(y, r, false);
    float g = fmaf(r.fa, p, -r.ft);
#if XENT_SMOOTHING
    g -= r.fe * class_weight(k.weights, r.t);
#endif
    return cap_slope(g, y, k);
}

/* The backward takes the target's gradient in the lane whose chunk holds the target (a scalar
 * edge's own lane, or target_in_items): in place, a gradient overwrites its logit, and a load of
 * the target's logit by lane 0 could return after another warp of the team stored the target's
 * vector (no barrier lies between them in the backward). The fused kernel reads the row before
 * its team's barrier and keeps lane 0's load. */
#define TARGET_IN_CHUNK (!ROW_PASS)

/* The target's gradient from its logit xt, loaded by the lane that holds it. */
__device__ __forceinline__ float target_grad(const rowg &r, const gargs &k, float xt) {
    rowg rt = r;
    rt.xt = xt;
    return grad_at_target(rt, k);
}

/* Element col's gradient from its logit x, the target's too where TARGET_IN_CHUNK. */
__device__ __forceinline__ float elem_grad(float x, int col, const rowg &r, const gargs &k, bool on_fma = false) {
#if TARGET_IN_CHUNK
    if (col == r.t) return target_grad(r, k, x);
#endif
    return grad_of(x, col, r, k, on_fma);
}

/* Two fp32 values into one word of the logits' 16-bit type, one instruction. */
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
#if XENT_LOGIT == 1
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
#endif
    return w;
}

/* Item i of a lane's share of a chunk: its gradient, stored at p's item i. */
__device__ __forceinline__ void store_item_grad(const chunk &ch, int i, unsigned char *p, int v, const slice &l,
                                                const rowg &r, const gargs &k) {
    unsigned o[VWORDS];
#if XENT_LOGIT == 0
#pragma unroll
    for (int j = 0; j < XENT_VEC; j++)
        o[j] = __float_as_uint(grad_of(elem(ch.r[i], j), vec_class(l, v, j), r, k, ON_FMA(i * XENT_VEC + j)));
#else
#pragma unroll
    for (int j = 0; j < XENT_VEC; j += 2)
        o[j / 2] = pack2(grad_of(elem(ch.r[i], j), vec_class(l, v, j), r, k, ON_FMA(i * XENT_VEC + j)),
                         grad_of(elem(ch.r[i], j + 1), vec_class(l, v, j + 1), r, k, ON_FMA(i * XENT_VEC + j + 1)));
#endif
    store_vec(p + i * ITEM_BYTES, o);
}

/* Whether this lane's items of the chunk at vb hold the target's element. That lane loads the
 * target's logit itself before its items' stores, which keep their order with its own load of
 * that address; the item's vector store writes grad_of's value there and the chunk's last store then
 * rewrites it, so that the items' stores test nothing an element. */
__device__ __forceinline__ bool target_in_items(const slice &l, int vb, int lane, const rowg &r) {
    const int tv = (int)(r.t - l.head); /* the target's place in the slice's aligned vectors */
    if (r.t < 0 || tv < 0) return false;
    const int d = tv / XENT_VEC - vb - lane; /* item d / TPR of this lane, if d is a multiple of TPR */
    return d >= 0 && d < lane_items(l, vb, lane) && d < XENT_ITEMS * XENT_TPR && d % XENT_TPR == 0;
}

/* The gradient of a lane's share of the chunk at vb. */
__device__ __forceinline__ void store_chunk_grad(const chunk &ch, const slice &l, int vb, int lane, const rowg &r,
                                                 const gargs &k, bool active) {
    unsigned char *p = l.g + lane_offset(l, vb, lane);
    const int rem = lane_items(l, vb, lane);
    const bool holds_t = TARGET_IN_CHUNK && active && target_in_items(l, vb, lane, r);
    const float xt = holds_t ? load_scalar(l.x, r.t) : 0.0f;
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        int v = vb + i * XENT_TPR + lane;
        if (!active || i * XENT_TPR >= rem) continue;
        store_item_grad(ch, i, p, v, l, r, k);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++)
        if (active && ch.ej[q] >= 0) store_scalar(l.g, ch.ej[q], elem_grad(ch.e[q], ch.ej[q], r, k));
    if (holds_t) store_scalar(l.g, r.t, target_grad(r, k, xt));
}

/* As store_chunk_grad, each item's registers then taking the next row's item
 * (handoff h, PREFETCH=2) once its gradient is stored. The two repeat their
 * target and edge lines: one function with an optional handoff, or those lines
 * in a function of their own, compiled the kernels to other instructions. */
__device__ __forceinline__ void store_chunk_grad_handoff(chunk &ch, const slice &l, int vb, int lane, const rowg &r,
                                                         const gargs &k, bool active, const handoff &h) {
    unsigned char *p = l.g + lane_offset(l, vb, lane);
    const int rem = lane_items(l, vb, lane);
    const bool holds_t = TARGET_IN_CHUNK && active && target_in_items(l, vb, lane, r);
    const float xt = holds_t ? load_scalar(l.x, r.t) : 0.0f;
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        int v = vb + i * XENT_TPR + lane;
        if (active && i * XENT_TPR < rem) store_item_grad(ch, i, p, v, l, r, k);
        if (h.on) load_item(ch, i, h.p, h.rem, h.keep);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++)
        if (active && ch.ej[q] >= 0) store_scalar(l.g, ch.ej[q], elem_grad(ch.e[q], ch.ej[q], r, k));
    if (holds_t) store_scalar(l.g, r.t, target_grad(r, k, xt));
    if (h.on) load_edges(ch, h.l, lane, h.edges);
}

/* Whether this block's slice holds column col (edges belong to rank 0). */
__device__ __forceinline__ bool slice_holds(const slice &l, long long col) {
    if (col < 0) return false;
    if (col < l.head || col >= l.head + (long long)l.nvec * XENT_VEC) return cluster_rank() == 0;
    long long v = (col - l.head) / XENT_VEC;
    return v >= l.v0 && v < l.v1;
}

/* The denominators xent_grad_denom sums: launched after it as a programmatic
 * dependent (runtime/launch.c), the rows wait here for its results, the first
 * time only in effect (a no-op once it is done, or without such a launch). */
__device__ __forceinline__ const double *ws_sums(const gargs &k) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    return (const double *)(k.ws + 16);
}

/* The factor, A and the one-hot term of a row with target t (vocabulary
 * index) and log-sum-exp lse. */
__device__ __forceinline__ rowg row_grad_terms(const gargs &k, long long row, long long t, float lse, bool bad,
                                               float xt) {
    rowg r;
    r.lse = lse;
    r.lse2 = lse * LOG2E;
    float eps_c = k.smoothing / (float)k.vocab;
    r.t = t - k.c0;
    if (t == k.ignore_index || bad || r.t < 0 || r.t >= k.c) r.t = -1;
    float wt = (t == k.ignore_index || bad) ? 0.0f : class_weight(k.weights, XENT_SHARD ? 0 : t);
    float W = XENT_WEIGHTS ? (float)ws_sums(k)[1] : (float)k.vocab;
    float onehot = (1.0f - k.smoothing) * wt;
    float a = onehot + eps_c * W + (XENT_ZLOSS ? 2.0f * k.z_loss * lse : 0.0f);
    float f = k.dloss ? k.dloss[XENT_REDUCTION == 0 ? row : 0] : 1.0f;
#if XENT_REDUCTION == 2
    f = (float)((double)f / ws_sums(k)[0]);
#endif
    f = t == k.ignore_index ? 0.0f : bad ? qnan() : f;
    r.fa = f * a;
    r.fe = f * eps_c;
    r.ft = f * onehot;
    r.xt = xt;
    return r;
}
