/* xent_grad, part 3: how a row is cut into the cluster's slices and the
 * team's chunks, their loads (and STASH's shared memory), and a chunk's max. */

/* Where a row's aligned vectors start and how the cluster divides them. */
struct slice {
    const unsigned char *x; /* the row's logits */
    unsigned char *g;       /* the row's gradient */
    int head;               /* scalar elements before the first aligned vector */
    int nvec;               /* aligned vectors */
    int tail;               /* scalar elements after them */
    int v0, v1;             /* this block's vectors */
};

__device__ __forceinline__ slice make_slice(const gargs &k, long long row) {
    slice l;
    l.x = k.logits + (size_t)row * (size_t)k.stride * ESIZE;
    l.g = k.grad + (size_t)row * (size_t)k.stride * ESIZE;
    int mis = (int)(((size_t)l.x % VBYTES) / ESIZE);
    l.head = mis ? XENT_VEC - mis : 0;
    if (l.head > k.c) l.head = k.c;
    l.nvec = (k.c - l.head) / XENT_VEC;
    l.tail = k.c - l.head - l.nvec * XENT_VEC;
    int per = (l.nvec + XENT_SPLIT - 1) / XENT_SPLIT;
    l.v0 = (int)cluster_rank() * per;
    l.v1 = min(l.v0 + per, l.nvec);
    if (l.v0 > l.v1) l.v0 = l.v1;
    return l;
}

/* Edge element e (head first, then tail) of the row, or -1 past them. */
__device__ __forceinline__ int edge_index(const slice &l, int e) {
    if (e < l.head) return e;
    if (e < l.head + l.tail) return l.head + l.nvec * XENT_VEC + (e - l.head);
    return -1;
}

/* A thread's share of a chunk: ITEMS vectors and, in the first chunk of the
 * cluster's first block, EDGES scalars. Missing elements read as -inf. */
struct chunk {
    unsigned r[XENT_ITEMS][VWORDS];
    float e[EDGES];
    int ej[EDGES];
};

/* Byte offset of a lane's first vector of the chunk at vb within its row.
 * Item i lies ITEM_BYTES * i further on: a constant, which the load and
 * store instructions carry as their immediate offset. */
#define ITEM_BYTES (XENT_TPR * VBYTES)
__device__ __forceinline__ size_t lane_offset(const slice &l, int vb, int lane) {
    return (size_t)l.head * ESIZE + (size_t)(vb + lane) * VBYTES;
}
/* Item i of the lane is in the slice when i * TPR < lane_items(l, vb, lane):
 * one count, not a predicate an item. */
__device__ __forceinline__ int lane_items(const slice &l, int vb, int lane) { return l.v1 - vb - lane; }

__device__ __forceinline__ void fill_missing(unsigned (&r)[VWORDS]) {
#pragma unroll
    for (int w = 0; w < VWORDS; w++) r[w] = XENT_LOGIT == 0 ? 0xff800000u : XENT_LOGIT == 1 ? 0xfc00fc00u : 0xff80ff80u;
}

/* Item i of a lane's share of a chunk, p its first item and rem as lane_items gives it. */
__device__ __forceinline__ void load_item(chunk &ch, int i, const unsigned char *p, int rem, bool keep) {
    if (i * XENT_TPR < rem) load_vec(p + i * ITEM_BYTES, ch.r[i], keep);
    else fill_missing(ch.r[i]);
}

__device__ __forceinline__ void load_edges(chunk &ch, const slice &l, int lane, bool edges) {
#pragma unroll
    for (int q = 0; q < EDGES; q++) {
        ch.ej[q] = edges ? edge_index(l, q * XENT_TPR + lane) : -1;
        ch.e[q] = ch.ej[q] >= 0 ? load_scalar(l.x, ch.ej[q]) : neg_inf();
    }
}

__device__ __forceinline__ void load_chunk(chunk &ch, const slice &l, int vb, int lane, bool edges, bool keep) {
    const unsigned char *p = l.x + lane_offset(l, vb, lane);
    const int rem = lane_items(l, vb, lane);
    /* load_item's test written out: through load_item, the kernels without the handoff compiled to other code */
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR < rem) load_vec(p + i * ITEM_BYTES, ch.r[i], keep);
        else fill_missing(ch.r[i]);
    }
    load_edges(ch, l, lane, edges);
}

/* Whether the fused kernel reads this slice twice: it does not fit a chunk,
 * and the chunks past the first are not stashed. */
__device__ __forceinline__ bool read_twice(const slice &l) {
    return XENT_MODE == 1 && !XENT_STASH && l.v1 - l.v0 > XENT_TPR * XENT_ITEMS;
}

#if XENT_STASH
extern __shared__ uint4 stash_mem[];
/* Where item i of the lane's share of the chunk at vb (past the first) waits. */
__device__ __forceinline__ unsigned *stash_at(const slice &l, int vb, int lane, int i) {
    return (unsigned *)stash_mem + (size_t)(vb - l.v0 - XENT_TPR * XENT_ITEMS + lane + i * XENT_TPR) * VWORDS;
}

__device__ __forceinline__ void stash_store(const chunk &ch, const slice &l, int vb, int lane) {
    const int rem = lane_items(l, vb, lane);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR >= rem) break;
        unsigned *s = stash_at(l, vb, lane, i);
#if VWORDS == 4
        *(uint4 *)s = make_uint4(ch.r[i][0], ch.r[i][1], ch.r[i][2], ch.r[i][3]);
#elif VWORDS == 2
        *(uint2 *)s = make_uint2(ch.r[i][0], ch.r[i][1]);
#else
        *s = ch.r[i][0];
#endif
    }
}

__device__ __forceinline__ void stash_load(chunk &ch, const slice &l, int vb, int lane) {
    const int rem = lane_items(l, vb, lane);
    /* load_item's test written out: through load_item, the kernels without the handoff compiled to other code */
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        if (i * XENT_TPR < rem) {
            const unsigned *s = stash_at(l, vb, lane, i);
#if VWORDS == 4
            const uint4 v = *(const uint4 *)s;
            ch.r[i][0] = v.x, ch.r[i][1] = v.y, ch.r[i][2] = v.z, ch.r[i][3] = v.w;
#elif VWORDS == 2
            const uint2 v = *(const uint2 *)s;
            ch.r[i][0] = v.x, ch.r[i][1] = v.y;
#else
            ch.r[i][0] = *s;
#endif
        } else fill_missing(ch.r[i]);
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++) ch.ej[q] = -1, ch.e[q] = neg_inf();
}
#endif

/* The chunk a row's first pass starts from. The fused kernel sums a row read
 * twice from its last chunk down to its first, so that the first (full, with
 * the edges) is the one still in registers when the gradient pass begins:
 * only the others are read again. */
__device__ __forceinline__ int first_vb(const slice &l) {
    const int chunk_vecs = XENT_TPR * XENT_ITEMS;
    return ROW_PASS && l.v1 > l.v0 ? l.v0 + (l.v1 - l.v0 - 1) / chunk_vecs * chunk_vecs : l.v0;
}

/* Pass 1's load of the chunk at vb: evict-last where pass 2 reads it again. */
__device__ __forceinline__ void load_pass1(chunk &ch, const slice &l, int vb, int lane, bool edges) {
    load_chunk(ch, l, vb, lane, edges && vb == l.v0, read_twice(l) && vb != l.v0);
}

/* The first chunk of the team's next row. */
__device__ __forceinline__ void load_next(chunk &ch, const gargs &k, long long next, int lane, bool edges) {
    const slice l = make_slice(k, next);
    load_pass1(ch, l, first_vb(l), lane, edges);
}

/* PREFETCH=2: the next row's first chunk (as load_next loads it) taken item
 * by item into the registers that the row's last gradient chunk frees as
 * each item is stored. The loads are in flight through the rest of the
 * row's gradient, at no registers beyond the one chunk. */
struct handoff {
    slice l;
    const unsigned char *p; /* the lane's first item */
    int rem;
    bool keep, edges, on;
};

__device__ __forceinline__ handoff handoff_to(const gargs &k, long long next, int lane, bool edges) {
    handoff h;
    h.on = next >= 0;
    h.l = make_slice(k, h.on ? next : 0);
    const int vb = first_vb(h.l);
    h.p = h.l.x + lane_offset(h.l, vb, lane);
    h.rem = lane_items(h.l, vb, lane);
    h.keep = read_twice(h.l) && vb != h.l.v0;
    h.edges = edges && vb == h.l.v0;
    return h;
}

/* Element j of item i as the softmax sees it; slots past the slice are -inf
 * (soft-capping would make their -inf fill a finite -cap). */
__device__ __forceinline__ float y_of(const chunk &ch, int i, int j, bool valid, float cap) {
#if XENT_SOFTCAP
    return valid ? capped(elem(ch.r[i], j), cap) : neg_inf();
#else
    return elem(ch.r[i], j);
#endif
}
__device__ __forceinline__ float edge_y(const chunk &ch, int q, float cap) {
#if XENT_SOFTCAP
    return ch.ej[q] >= 0 ? capped(ch.e[q], cap) : neg_inf();
#else
    return ch.e[q];
#endif
}

/* Class index (within the c columns) of element j of vector v. */
__device__ __forceinline__ int vec_class(const slice &l, int v, int j) { return l.head + v * XENT_VEC + j; }

#if ROW_PASS
/* The largest logit of a lane's chunk (slots past the slice hold -inf).
 * 16-bit logits take the max of packed pairs and widen the one pair left:
 * widened copies kept for the sums would double a held chunk's registers. */
__device__ __forceinline__ float chunk_max(const chunk &ch, int rem, float cap) {
#if XENT_LOGIT != 0 && !XENT_SOFTCAP && __CUDA_ARCH__ >= 800
    unsigned w = ch.r[0][0];
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++)
#pragma unroll
        for (int q = 0; q < VWORDS; q++) w = max_pair(w, ch.r[i][q]);
    unsigned pair[VWORDS] = {w};
    return fmaxf(elem(pair, 0), elem(pair, 1));
#else
    float cm = neg_inf();
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++)
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) cm = fmaxf(cm, y_of(ch, i, j, i * XENT_TPR < rem, cap));
    return cm;
#endif
}

__device__ __forceinline__ void chunk_sums(acc &a, const chunk &ch, const slice &l, int vb, int lane,
                                           const gargs &k) {
    const int rem = lane_items(l, vb, lane);
    float cm = chunk_max(ch, rem, k.softcap);
#pragma unroll
    for (int q = 0; q < EDGES; q++) cm = fmaxf(cm, edge_y(ch, q, k.softcap));
    acc_rebase(a, fmaxf(a.m, cm));
    /* the subtraction first: the max's own term is exactly 1 (a row of one
     * class has loss 0, not a rounding of m * log2e) */
    const float m = safe_max(a.m);
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        int v = vb + i * XENT_TPR + lane;
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) {
            float y = y_of(ch, i, j, i * XENT_TPR < rem, k.softcap);
            a.s += exp2_term((y - m) * LOG2E, ON_FMA(i * XENT_VEC + j));
#if XENT_SMOOTHING || XENT_SHARD
            if (i * XENT_TPR < rem) {
                float w = class_weight(k.weights, vec_class(l, v, j));
                a.sy += w * (y - a.m);
                a.sw += w;
            }
#endif
        }
    }
#pragma unroll
    for (int q = 0; q < EDGES; q++) {
        float y = edge_y(ch, q, k.softcap);
        a.s += exp_shifted(y, m);
#if XENT_SMOOTHING || XENT_SHARD
        if (ch.ej[q] >= 0) {
            float w = class_weight(k.weights, ch.ej[q]);
            a.sy += w * (y - a.m);
            a.sw += w;
        }
#endif
    }
}
#endif
