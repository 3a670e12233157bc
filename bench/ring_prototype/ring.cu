// Prototype: fused mean cross-entropy (loss rows + gradient) for rows of C
// logits that fit shared memory, each team's next rows loaded by
// cp.async.bulk into a ring of STAGES slots while it computes this one.
// ESIZE 4 (fp32) or 2 (bf16). TPR threads a team (32: a warp; == BLOCK: the block).
#ifndef ESIZE
#define ESIZE 2
#endif
#ifndef C
#define C 4096
#endif
#ifndef TPR
#define TPR 32
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef HOLD
#define HOLD 1
#endif
#ifndef UNR
#define UNR 4
#endif
#ifndef MINB
#define MINB 1
#endif
constexpr int kUnr = UNR;
#define ROWB (C * ESIZE)
#define VECS (ROWB / 16)
#define ITEMS (VECS / TPR)
#define TEAMS (BLOCK / TPR)
#define LOG2E 1.4426950408889634f

struct u4 { unsigned x, y, z, w; };

__device__ __forceinline__ unsigned saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(unsigned long long *b) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void bulk_load(void *dst, const void *src, unsigned bytes, unsigned long long *b) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(saddr(b)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(saddr(dst)), "l"(src), "r"(bytes), "r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long *b, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(saddr(b)), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void team_sync(int team) {
#if TPR == 32
    __syncwarp();
#elif TPR == BLOCK
    __syncthreads();
#else
    asm volatile("bar.sync %0, %1;" :: "r"(team + 1), "r"(TPR) : "memory");
#endif
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// team-wide reduction through shared memory (TPR == BLOCK > 32)
__device__ __forceinline__ float team_red(float v, bool is_max, float *scratch, int team, int lane) {
    v = is_max ? warp_max(v) : warp_sum(v);
#if TPR > 32
    const int w = threadIdx.x / 32, l = threadIdx.x & 31;
    if (l == 0) scratch[w] = v;
    team_sync(team);
    v = l < TPR / 32 ? scratch[l] : (is_max ? __int_as_float(0xff800000) : 0.0f);
    v = is_max ? warp_max(v) : warp_sum(v);
    team_sync(team);
#endif
    return v;
}

__device__ __forceinline__ u4 lds(const u4 *p) {
    u4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(saddr(p)));
    return v;
}

__device__ __forceinline__ float elem(const u4 &v, int j) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#if ESIZE == 4
    return __uint_as_float(w[j]);
#else
    unsigned u = w[j / 2];
    return __uint_as_float(j & 1 ? (u & 0xffff0000u) : (u << 16));
#endif
}
#define EPV (16 / ESIZE)

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}

extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
ring(const unsigned char *x, const long long *tgt, unsigned char *g, float *loss, long long n, float inv_n) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ unsigned long long bars[TEAMS * STAGES];
    __shared__ float scratch[BLOCK / 32 + 1];
    const int team = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    unsigned char *slots = sm + (size_t)team * STAGES * ROWB;
    unsigned long long *bar = bars + team * STAGES;
    const long long nt = (long long)gridDim.x * TEAMS;
    long long row = (long long)blockIdx.x * TEAMS + team;
    if (lane == 0) {
        for (int s = 0; s < STAGES; s++) bar_init(bar + s);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (lane == 0)
        for (int s = 0; s < STAGES; s++) {
            long long r = row + s * nt;
            if (r < n) bulk_load(slots + s * ROWB, x + r * ROWB, ROWB, bar + s);
        }
    for (int it = 0; row < n; row += nt, it++) {
        const int s = it % STAGES;
        const long long t = tgt[row];
        bar_wait(bar + s, (it / STAGES) & 1);
        const u4 *sv = (const u4 *)(slots + s * ROWB);
#if HOLD
        u4 v[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; i++) v[i] = sv[i * TPR + lane];
#define V(i) v[i]
#else
#define V(i) lds(sv + (i) * TPR + lane)
#endif
        float xt = 0.0f;
        if (lane == 0) {
#if ESIZE == 4
            xt = ((const float *)(slots + s * ROWB))[t];
#else
            xt = __uint_as_float(((unsigned)((const unsigned short *)(slots + s * ROWB))[t]) << 16);
#endif
        }
#if HOLD
        team_sync(team);  // every lane has read the slot
        if (lane == 0) {
            long long r = row + STAGES * nt;
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            if (r < n) bulk_load(slots + s * ROWB, x + r * ROWB, ROWB, bar + s);
        }
#endif
        float m = __int_as_float(0xff800000);
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = V(i);
#pragma unroll
            for (int j = 0; j < EPV; j++) m = fmaxf(m, elem(q, j));
        }
        m = team_red(m, true, scratch, team, lane);
        const float ml = m * LOG2E;
        float sum = 0.0f;
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = V(i);
#pragma unroll
            for (int j = 0; j < EPV; j++) sum += ex2(fmaf(elem(q, j), LOG2E, -ml));
        }
        sum = team_red(sum, false, scratch, team, lane);
        const float lse2 = ml + __log2f(sum);
        unsigned char *gr = g + row * ROWB;
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = V(i);
            u4 o;
            unsigned w[4];
#if ESIZE == 4
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = __float_as_uint(inv_n * ex2(fmaf(elem(q, j), LOG2E, -lse2)));
#else
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = pack2(inv_n * ex2(fmaf(elem(q, 2 * j), LOG2E, -lse2)),
                             inv_n * ex2(fmaf(elem(q, 2 * j + 1), LOG2E, -lse2)));
#endif
            o.x = w[0]; o.y = w[1]; o.z = w[2]; o.w = w[3];
            *(u4 *)(gr + (size_t)(i * TPR + lane) * 16) = o;
        }
#if !HOLD
        team_sync(team);  // every lane is done with the slot
        if (lane == 0) {
            long long r = row + STAGES * nt;
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            if (r < n) bulk_load(slots + s * ROWB, x + r * ROWB, ROWB, bar + s);
        }
#endif
        team_sync(team);
        if (lane == 0) {
            const float lse = lse2 / LOG2E;
            loss[row] = lse - xt;
            float gt = inv_n * (ex2(fmaf(xt, LOG2E, -lse2)) - 1.0f);
#if ESIZE == 4
            ((float *)gr)[t] = gt;
#else
            ((unsigned short *)gr)[t] = (unsigned short)(pack2(gt, 0.0f) & 0xffffu);
#endif
        }
    }
}

__device__ __forceinline__ void sts(u4 *p, const u4 &v) {
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" :: "r"(saddr(p)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ void bulk_store(void *dst, const void *src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(saddr(src)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

#ifndef COMPUTE
#define COMPUTE 1
#endif

/* The gradient written over the row's slot and stored by cp.async.bulk;
 * slot s - 1 is refilled once its store has read it. COMPUTE=0: a copy. */
extern "C" __global__ void __launch_bounds__(BLOCK, MINB)
ring_st(const unsigned char *x, const long long *tgt, unsigned char *g, float *loss, long long n, float inv_n) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ unsigned long long bars[TEAMS * STAGES];
    __shared__ float scratch[BLOCK / 32 + 1];
    const int team = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    unsigned char *slots = sm + (size_t)team * STAGES * ROWB;
    unsigned long long *bar = bars + team * STAGES;
    const long long nt = (long long)gridDim.x * TEAMS;
    long long row = (long long)blockIdx.x * TEAMS + team;
    if (lane == 0) {
        for (int s = 0; s < STAGES; s++) bar_init(bar + s);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (lane == 0)
        for (int s = 0; s < STAGES; s++) {
            long long r = row + s * nt;
            if (r < n) bulk_load(slots + s * ROWB, x + r * ROWB, ROWB, bar + s);
        }
    for (int it = 0; row < n; row += nt, it++) {
        const int s = it % STAGES;
        unsigned char *slot = slots + s * ROWB;
        u4 *sv = (u4 *)slot;
#if COMPUTE
        const long long t = tgt[row];
#endif
        bar_wait(bar + s, (it / STAGES) & 1);
#if COMPUTE
        float xt = 0.0f;
        if (lane == 0) {
#if ESIZE == 4
            xt = ((const float *)slot)[t];
#else
            xt = __uint_as_float(((unsigned)((const unsigned short *)slot)[t]) << 16);
#endif
        }
        float m = __int_as_float(0xff800000);
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = lds(sv + i * TPR + lane);
#pragma unroll
            for (int j = 0; j < EPV; j++) m = fmaxf(m, elem(q, j));
        }
        m = team_red(m, true, scratch, team, lane);
        const float ml = m * LOG2E;
        float sum = 0.0f;
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = lds(sv + i * TPR + lane);
#pragma unroll
            for (int j = 0; j < EPV; j++) sum += ex2(fmaf(elem(q, j), LOG2E, -ml));
        }
        sum = team_red(sum, false, scratch, team, lane);
        const float lse2 = ml + __log2f(sum);
#pragma unroll kUnr
        for (int i = 0; i < ITEMS; i++) {
            const u4 q = lds(sv + i * TPR + lane);
            u4 o;
            unsigned w[4];
#if ESIZE == 4
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = __float_as_uint(inv_n * ex2(fmaf(elem(q, j), LOG2E, -lse2)));
#else
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = pack2(inv_n * ex2(fmaf(elem(q, 2 * j), LOG2E, -lse2)),
                             inv_n * ex2(fmaf(elem(q, 2 * j + 1), LOG2E, -lse2)));
#endif
            o.x = w[0]; o.y = w[1]; o.z = w[2]; o.w = w[3];
            sts(sv + i * TPR + lane, o);
        }
        team_sync(team);
        if (lane == 0) {
            const float lse = lse2 / LOG2E;
            loss[row] = lse - xt;
            float gt = inv_n * (ex2(fmaf(xt, LOG2E, -lse2)) - 1.0f);
#if ESIZE == 4
            ((float *)slot)[t] = gt;
#else
            ((unsigned short *)slot)[t] = (unsigned short)(pack2(gt, 0.0f) & 0xffffu);
#endif
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        team_sync(team);
#endif
        if (lane == 0) {
            bulk_store(g + row * ROWB, slot, ROWB);
            if (it > 0) {
                asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
                const int p = (it - 1) % STAGES;
                const long long r = row - nt + STAGES * nt;
                if (r < n) bulk_load(slots + p * ROWB, x + r * ROWB, ROWB, bar + p);
            }
        }
    }
    if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
