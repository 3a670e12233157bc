/* xent_grad, part 6: one row of a team or cluster, from its sums to its
 * gradient, and the elements at the stream's edges. */

/* One row of this team (or cluster). Returns the row's (loss, weight).
 * cur: with PREFETCH, the row's first chunk on entry (already loading) and
 * the first chunk of the row `next` on return (next < 0: none). PREFETCH=1:
 * the chunk after the one in use is always in flight: the row's next chunk,
 * pass 2's first (the row again, from L2), or the next row's first.
 * PREFETCH=2: the next row's first chunk is loaded into the last gradient
 * chunk's registers as they are freed (handoff). */
__device__ __forceinline__ double2 do_row(const gargs &k, long long row, bool active, int lane, int parity,
                                          chunk &cur, long long next) {
    const slice l = make_slice(k, row);
    const bool edges = cluster_rank() == 0;
    const long long t = (long long)k.targets[row];
    const bool bad = target_bad(t, k);
    const int chunk_vecs = XENT_TPR * XENT_ITEMS;
    /* the fused kernel's target logit, loaded first: its latency hides under the row's, and an
     * in-place gradient has not overwritten it yet (the backward's comes with its chunk) */
    const long long tc = t - k.c0;
    const bool has_t = ROW_PASS && lane == 0 && !bad && t != k.ignore_index && tc >= 0 && tc < k.c && (edges || GRAD);
    const float xt = has_t ? load_scalar(l.x, tc) : 0.0f;
#if XENT_PREFETCH == 1
    chunk nx;
#endif
    float lse;
    double2 out = make_double2(0.0, 0.0);
#if ROW_PASS
    acc a;
    acc_init(a);
    for (int vb = first_vb(l);; vb -= chunk_vecs) {
        const bool more = vb > l.v0;
#if XENT_PREFETCH == 1
        if (more) load_pass1(nx, l, vb - chunk_vecs, lane, edges);
        else if (GRAD && read_twice(l)) load_chunk(nx, l, l.v0 + chunk_vecs, lane, false, false);
        else if (next >= 0) load_next(nx, k, next, lane, edges);
        chunk_sums(a, cur, l, vb, lane, k);
        if (!more) break;
        cur = nx;
#else
        if (!XENT_PREFETCH || vb != first_vb(l)) load_pass1(cur, l, vb, lane, edges);
        chunk_sums(a, cur, l, vb, lane, k);
#if XENT_STASH
        if (more) stash_store(cur, l, vb, lane);
#endif
        if (!more) break;
#endif
    }
    team_merge(a);
#if XENT_SPLIT > 1
    cluster_merge(a, parity);
#endif
    lse = a.m == neg_inf() ? neg_inf() : safe_max(a.m) + logf(a.s);
    out = row_out(k, row, t, bad, capped(xt, k.softcap), a, lse, active && lane == 0 && edges);
#else
    lse = k.lse[row];
    if (active && lane == 0 && edges && bad) atomicOr(k.err, 1);
#endif
#if GRAD
    const rowg r = row_grad_terms(k, row, t, lse, bad, xt);
    /* the fused kernel's first chunk is still in registers; the others (and
     * all of the backward's) are read here */
#if XENT_PREFETCH == 2
    const handoff h = handoff_to(k, next, lane, edges);
#endif
    for (int vb = l.v0;; vb += chunk_vecs) {
        const bool more = vb + chunk_vecs < l.v1;
#if XENT_PREFETCH == 1
        if (vb != l.v0 || !ROW_PASS) { /* pass 1 left the fused kernel's next chunk in nx */
            if (more) load_chunk(nx, l, vb + chunk_vecs, lane, false, false);
            else if (next >= 0) load_next(nx, k, next, lane, edges);
        }
        store_chunk_grad(cur, l, vb, lane, r, k, active);
        cur = nx;
#else
#if XENT_STASH
        if (vb != l.v0) stash_load(cur, l, vb, lane);
#else
        if (vb != l.v0 || !(ROW_PASS || XENT_PREFETCH)) load_chunk(cur, l, vb, lane, edges && vb == l.v0, false);
#endif
#if XENT_PREFETCH == 2
        if (!more) store_chunk_grad_handoff(cur, l, vb, lane, r, k, active, h);
        else
#endif
        store_chunk_grad(cur, l, vb, lane, r, k, active);
#endif
        if (!more) break;
    }
#if !TARGET_IN_CHUNK
    team_barrier();
    if (active && has_t && slice_holds(l, r.t)) store_scalar(l.g, r.t, grad_at_target(r, k));
#endif
#elif XENT_PREFETCH == 1
    cur = nx;
#endif
    return out;
}

#if XENT_FLAT
#define FLAT_TILE (XENT_BLOCK * XENT_ITEMS)

/* Element e of the stream, alone: the stream's edges. */
__device__ __forceinline__ void flat_scalar(const gargs &k, long long e, long long r0, const rowg *rows) {
    const long long row = e / k.c;
    store_scalar(k.grad, e, elem_grad(load_scalar(k.logits, e), e - row * k.c, rows[row - r0], k));
}
