/* xent_grad, part 7: the entry points: the flat backward and the rows
 * (xent_grad), the mean's denominators, the rescale and the shards' combine. */

/* The backward of rows back to back as one stream of n C elements, so that
 * no row start costs scalar edges or a short last chunk: the vectors start at
 * the first aligned element, block b takes FLAT_TILE of them lane by lane as
 * a streaming read does, block 0 takes the elements before them and the
 * last vector's block those after. While a block's loads are in flight, a
 * thread a row computes the terms of the rows the block covers into shared
 * memory (space.c's flat_rows bounds them by BLOCK). */
__device__ __forceinline__ void flat_backward(const gargs &k) {
    __shared__ rowg rows[XENT_BLOCK];
    const long long total = k.n * (long long)k.c;
    const int mis = (int)(((size_t)k.logits % VBYTES) / ESIZE);
    const long long head = min((long long)(mis ? XENT_VEC - mis : 0), total);
    const long long nvec = (total - head) / XENT_VEC, tail = head + nvec * XENT_VEC;
    const long long v0 = (long long)blockIdx.x * FLAT_TILE, last = nvec > 0 ? (nvec - 1) / FLAT_TILE : 0;
    if ((long long)blockIdx.x > last) return;
    const unsigned char *x = k.logits + head * ESIZE;
    unsigned char *g = k.grad + head * ESIZE;
    unsigned r[XENT_ITEMS][VWORDS];
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        const long long v = v0 + i * XENT_BLOCK + threadIdx.x;
        if (v < nvec) load_vec(x + v * VBYTES, r[i], false);
    }
    const long long lo = blockIdx.x == 0 ? 0 : head + v0 * XENT_VEC;
    const long long hi = (long long)blockIdx.x == last ? total - 1 : head + min(v0 + FLAT_TILE, nvec) * XENT_VEC - 1;
    const long long r0 = lo / k.c;
    if (threadIdx.x < hi / k.c - r0 + 1) {
        const long long row = r0 + threadIdx.x, t = (long long)k.targets[row];
        const bool bad = target_bad(t, k);
        if (bad) atomicOr(k.err, 1);
        rows[threadIdx.x] = row_grad_terms(k, row, t, k.lse[row], bad, 0.0f);
    }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x < head) flat_scalar(k, threadIdx.x, r0, rows);
    if ((long long)blockIdx.x == last && threadIdx.x < total - tail) flat_scalar(k, tail + threadIdx.x, r0, rows);
    /* the row of a vector's first element by a float quotient, off by at most one */
    const float inv_c = 1.0f / (float)k.c;
#pragma unroll
    for (int i = 0; i < XENT_ITEMS; i++) {
        const long long v = v0 + i * XENT_BLOCK + threadIdx.x;
        if (v >= nvec) continue;
        const long long rel = head + v * XENT_VEC - r0 * k.c;
        int q = (int)((float)rel * inv_c);
        long long col = rel - (long long)q * k.c;
        if (col < 0) q--, col += k.c;
        else if (col >= k.c) q++, col -= k.c;
        float gv[XENT_VEC];
        if (col + XENT_VEC <= k.c) {
#pragma unroll
            for (int j = 0; j < XENT_VEC; j++) gv[j] = elem_grad(elem(r[i], j), col + j, rows[q], k);
        } else { /* the vector crosses into the next row */
#pragma unroll
            for (int j = 0; j < XENT_VEC; j++) {
                const bool next = col + j >= k.c;
                gv[j] = elem_grad(elem(r[i], j), next ? col + j - k.c : col + j, rows[q + next], k);
            }
        }
        unsigned o[VWORDS];
#if XENT_LOGIT == 0
#pragma unroll
        for (int j = 0; j < XENT_VEC; j++) o[j] = __float_as_uint(gv[j]);
#else
#pragma unroll
        for (int j = 0; j < XENT_VEC; j += 2) o[j / 2] = pack2(gv[j], gv[j + 1]);
#endif
        store_vec(g + v * VBYTES, o);
    }
}
#endif

extern "C" __global__ void
#if XENT_SPLIT > 1
__cluster_dims__(XENT_SPLIT, 1, 1)
#endif
__launch_bounds__(XENT_BLOCK, MIN_BLOCKS) xent_grad(const gargs k) {
#if XENT_FLAT
    flat_backward(k);
    return;
#endif
    const int team = threadIdx.x / XENT_TPR, lane = threadIdx.x % XENT_TPR;
    const long long groups = (k.n + TEAMS - 1) / TEAMS;
    const long long first = blockIdx.x / XENT_SPLIT, step = gridDim.x / XENT_SPLIT;
    double l = 0.0, w = 0.0;
    int parity = 0;
    chunk cur;
#if XENT_PREFETCH
    if (first < groups) {
        const slice l0 = make_slice(k, min(first * TEAMS + team, k.n - 1));
        load_pass1(cur, l0, first_vb(l0), lane, cluster_rank() == 0);
    }
#endif
    for (long long g = first; g < groups; g += step, parity ^= 1) {
        long long row = g * TEAMS + team;
        bool active = row < k.n;
        long long next = g + step < groups ? min((g + step) * TEAMS + team, k.n - 1) : -1;
        double2 o = do_row(k, active ? row : k.n - 1, active, lane, parity, cur, next);
        l += o.x;
        w += o.y;
    }
#if XENT_SPLIT > 1
    cluster_sync(); /* no block leaves while another reads its shared memory */
#endif
#if ROW_PASS && !XENT_SHARD && XENT_REDUCTION != 0
    finish(l, w, k.loss, (unsigned *)k.ws, (double2 *)(k.ws + PARTS_AT), XENT_BLOCK);
#endif
}

#if XENT_REDUCTION == 2 || XENT_WEIGHTS
/* Before a gradient: the mean's sum of the non-ignored rows' target weights
 * and the sum W of the class weights, by DENOM_BLOCKS blocks of 256 and the
 * last of them in a fixed order. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_denom(const gargs k) {
#if __CUDA_ARCH__ >= 900
    /* the rows' kernel may start now: it waits for these sums where it reads them */
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    double d = 0.0, W = 0.0;
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < k.n; i += 256ll * gridDim.x) {
        long long t = (long long)k.targets[i];
        if (t != k.ignore_index && t >= 0 && t < k.vocab) d += class_weight(k.weights, XENT_SHARD ? 0 : t);
    }
#if XENT_WEIGHTS
    for (long long j = blockIdx.x * 256ll + threadIdx.x; j < k.c; j += 256ll * gridDim.x) W += k.weights[j];
#endif
    unsigned *ticket = (unsigned *)(k.ws + 4);
    double2 t;
    if (!grid_sum2(d, W, t, ticket, (double2 *)(k.ws + 32), 256)) return;
    if (threadIdx.x == 0) {
        double *sums = (double *)(k.ws + 16);
        sums[0] = t.x;
        sums[1] = t.y;
        *ticket = 0u;
    }
}
#endif

/* A fused gradient (dloss taken as 1) times dloss, in place: a block takes
 * rows; a row whose factor is exactly 1 is left alone. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_rescale(const gargs k) {
#if XENT_REDUCTION != 0
    const float f = k.dloss[0];
    if (f == 1.0f) return;
#endif
    for (long long row = blockIdx.x; row < k.n; row += gridDim.x) {
#if XENT_REDUCTION == 0
        const float f = k.dloss[row];
        if (f == 1.0f) continue;
#endif
        unsigned char *g = k.grad + (size_t)row * (size_t)k.stride * ESIZE;
        for (int j = threadIdx.x; j < k.c; j += 256) store_scalar(g, j, load_scalar(g, j) * f);
    }
}

/* Shards' partials into each row's loss and global log-sum-exp: stats holds
 * shards blocks of 2n floats (the rows' lse over the shard, then their
 * linear part). A thread per row. */
extern "C" __global__ void __launch_bounds__(256) xent_grad_combine(const gargs k) {
    double l = 0.0, w = 0.0;
    for (long long row = blockIdx.x * 256ll + threadIdx.x; row < k.n; row += 256ll * gridDim.x) {
        float m = neg_inf(), lin = 0.0f;
        for (int s = 0; s < k.shards; s++) {
            m = fmaxf(m, k.stats[(size_t)s * 2 * k.n + row]);
            lin += k.stats[(size_t)s * 2 * k.n + k.n + row];
        }
        float sum = 0.0f;
        for (int s = 0; s < k.shards; s++) sum += exp_shifted(k.stats[(size_t)s * 2 * k.n + row], safe_max(m));
        float lse = m == neg_inf() ? m : safe_max(m) + logf(sum);
        long long t = (long long)k.targets[row];
        bool bad = target_bad(t, k);
        if (bad) atomicOr(k.err, 1);
        float loss = t == k.ignore_index ? 0.0f : bad ? qnan() : lse - lin;
#if XENT_ZLOSS
        if (t != k.ignore_index) loss += k.z_loss * lse * lse;
#endif
        if (k.lse) k.lse[row] = lse;
#if XENT_REDUCTION == 0
        k.loss[row] = loss;
#else
        l += loss;
        w += (t == k.ignore_index || bad) ? 0.0 : 1.0;
#endif
    }
#if XENT_REDUCTION != 0
    finish(l, w, k.loss, (unsigned *)k.ws, (double2 *)(k.ws + PARTS_AT), 256);
#endif
}
