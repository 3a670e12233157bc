/* xent_fwd, part 3: the tile path (TILE=1). Tiny rows, a thread per row, each warp
 * staging 32 rows in shared memory. */


#if XENT_TILE
#if XENT_LOGIT == 0
typedef unsigned tile_t;
#define TILE_LD ".u32"
#else
typedef unsigned short tile_t;
#define TILE_LD ".u16"
#endif
/* Vector loads a lane issues before storing any: with one in flight at a
 * time, latency, not bandwidth, bounds a warp's staging (a group of 32 rows
 * of 10 fp32 is 80 16-byte vectors, one batch for the warp). */
#define TILE_BATCH 4
#define VBYTES (XENT_VEC * ESIZE)

__device__ __forceinline__ tile_t load_raw(const unsigned char *p) {
    tile_t v;
#if XENT_LOGIT == 0
    asm(LD TILE_LD " %0, [%1];" : "=r"(v) : "l"(p));
#else
    asm(LD TILE_LD " %0, [%1];" : "=h"(v) : "l"(p));
#endif
    return v;
}

/* In asm: NVVM split the first store of a batch into four words, even with
 * __builtin_assume_aligned. The clobber keeps it before the tile's reads.
 * a is a shared-space address: converted once per group, not per store. */
__device__ __forceinline__ void store_vec(unsigned a, const unsigned (&r)[VWORDS]) {
#if VWORDS == 4
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "r"(a), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#elif VWORDS == 2
    asm volatile("st.shared.v2.u32 [%0], {%1,%2};" :: "r"(a), "r"(r[0]), "r"(r[1]) : "memory");
#else
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(r[0]) : "memory");
#endif
}

__device__ __forceinline__ float tile_elem(tile_t v) {
#if XENT_LOGIT == 0
    return __uint_as_float(v);
#else
    return widen16(v);
#endif
}

/* Rows this short are read into registers once and reduced unrolled. */
#define TILE_UNROLL_C 32

/* One thread's row, read from the staged tile: max, then the sums. The
 * target is read by its index, not found by comparing it with every j. */
__device__ __forceinline__ acc tile_row(const tile_t *x, int c, int t, const float *__restrict__ w) {
    acc a;
    acc_init(a);
#if defined(XENT_C) && XENT_C <= TILE_UNROLL_C
    (void)c;
    float v[XENT_C];
#pragma unroll
    for (int j = 0; j < XENT_C; j++) v[j] = tile_elem(x[j]);
    float m = neg_inf(); /* not v[0]: fmaxf drops NaN as the loop below does */
#pragma unroll
    for (int j = 0; j < XENT_C; j++) m = fmaxf(m, v[j]);
    a.m = m;
    const float ml = safe_max(m);
    float s[2] = {0.0f, 0.0f}; /* two chains, each from its first term */
#pragma unroll
    for (int j = 0; j < XENT_C; j++) {
        const float e = exp_shifted(v[j], ml);
        s[j & 1] = j < 2 ? e : s[j & 1] + e;
        acc_side(a, v[j], j, -1, w);
    }
    a.s = s[0] + s[1];
#else
    float m = neg_inf();
    for (int j = 0; j < c; j++) m = fmaxf(m, tile_elem(x[j]));
    a.m = m;
    const float ml = safe_max(m);
    for (int j = 0; j < c; j++) {
        float v = tile_elem(x[j]);
        a.s += exp_shifted(v, ml);
        acc_side(a, v, j, -1, w);
    }
#endif
    if (t >= 0) a.xt = tile_elem(x[t]);
    return a;
}

/* Stage the span of rows [r0, r0 + rows) ((rows - 1) * stride + c elements)
 * into a warp's region and return mis, the span start's misalignment in
 * elements. Element i goes to index i + mis, so the span's aligned vectors
 * land on aligned shared addresses: one vector store each. The few scalars
 * before the first aligned vector and after the last take a lane each. */
__device__ __forceinline__ int stage_warp(unsigned char *region, const unsigned char *logits, long long r0,
                                          int rows, int c, long long stride, int lane) {
    const unsigned char *src = logits + (size_t)r0 * (size_t)stride * ESIZE;
    const int mis = (int)(((size_t)src / ESIZE) % XENT_VEC);
    const int count = (int)((rows - 1) * stride + c);
    const int head = mis ? min(XENT_VEC - mis, count) : 0;
    const int nv = (count - head) / XENT_VEC;
    const int tail = head + nv * XENT_VEC;
    tile_t *dst = (tile_t *)region + mis;
    /* head and tail are shorter than a vector, so a lane each suffices */
    const bool has_head = lane < head, has_tail = lane < count - tail;
    tile_t head_x = 0, tail_x = 0;
    if (has_head) head_x = load_raw(src + (size_t)lane * ESIZE);
    if (has_tail) tail_x = load_raw(src + (size_t)(tail + lane) * ESIZE);
    const unsigned char *vsrc = src + (size_t)head * ESIZE;
    const unsigned vdst = (unsigned)__cvta_generic_to_shared(dst + head);
    /* a batch covers a group of tiny rows: unrolled, the loop only took registers */
#pragma unroll 1
    for (int v = lane; v < nv; v += 32 * TILE_BATCH) {
        unsigned r[TILE_BATCH][VWORDS];
#pragma unroll
        for (int k = 0; k < TILE_BATCH; k++)
            if (v + 32 * k < nv) load_vec(vsrc + (size_t)(v + 32 * k) * VBYTES, r[k]);
#pragma unroll
        for (int k = 0; k < TILE_BATCH; k++)
            if (v + 32 * k < nv) store_vec(vdst + (unsigned)(v + 32 * k) * VBYTES, r[k]);
    }
    if (has_head) dst[lane] = head_x;
    if (has_tail) dst[tail + lane] = tail_x;
    return mis;
}
#endif

