#!/usr/bin/env python3
"""Few rows of a huge vocabulary: what one level of arrivals costs, and whether a cluster
merge in distributed shared memory before it is cheaper (docs/performance.md, "Few rows").

Stand-alone kernels over the same n x c fp32 logits, each timed back to back in one
process (CUDA events, the median of a few batches), each result checked against torch:
  read      the floor: every block reads 32 KB, eight 16-byte loads a thread, and stores one
            word only if a value is NaN (nothing else), so that the loads are not dropped;
  arrive    a row is cut into S segments of one 256-thread block each; every block publishes
            its (max, sum of exponentials) and counts its arrival on one counter; the last
            block's first warp merges the rows one after another and writes the mean loss (one
            level of arrivals as in xent, but a serial merge: slower than xent's, whose lanes
            merge the rows together, so only the publish rows compare with xent);
  cluster   the same segments in clusters of CL blocks (__cluster_dims__): each cluster
            merges its blocks' sums through distributed shared memory first, and only the
            cluster's first block publishes and arrives, so S / CL arrivals a row.

    python3 bench/few_rows_probe.py [--n 7] [--c 1000003] [--segments 16 32 64] [--cluster 2 4 8]

Segment counts that are not powers of two (18, 19, 37, 38 at n = 7: about one or two blocks an
SM of 132) ask whether an even spread of blocks over the SMs is worth what xent's powers of two
leave uneven; "publish" (segments that publish and leave) times the read and the blocks'
reductions without any combine, so that arrive - publish is what this probe's combine costs.
"masked" publishes as well, but issues each round's eight loads at once even where a segment
holds fewer vectors than a round (publish then loads them one at a time), in two forms: "fold"
folds each vector into the running (max, sum) as it is consumed, "chunk" takes the round's max
first, as xent's chunks do, so that its exponentials wait for the round's last load.
"""
import argparse

import cupy as cp
import torch

from _timing import back_to_back_us  # bench/, the script's own folder, is on sys.path

SRC = r"""
#define BLOCK 256
#ifndef CL
#define CL 1
#endif
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float4 ld_cs(const float4 *p) {
    float4 v;
    asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
extern "C" __global__ void __launch_bounds__(BLOCK) read_floor(const float4 *x, long long nvec, float *sink) {
    long long base = (long long)blockIdx.x * (BLOCK * 8) + threadIdx.x;
    float4 v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        long long j = base + (long long)i * BLOCK;
        v[i] = j < nvec ? ld_cs(x + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += v[i].x + v[i].y + v[i].z + v[i].w;
    if (s != s) sink[0] = s;
}

struct ms { float m, s; };
__device__ __forceinline__ ms merge(ms a, ms b) {
    float m = fmaxf(a.m, b.m);
    if (m == NEG_INF) return a;
    return ms{m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}
__device__ __forceinline__ ms add4(ms a, float4 v) {
    float m = fmaxf(fmaxf(fmaxf(a.m, v.x), fmaxf(v.y, v.z)), v.w);
    return ms{m, a.s * __expf(a.m - m) + __expf(v.x - m) + __expf(v.y - m) + __expf(v.z - m) + __expf(v.w - m)};
}
__device__ __forceinline__ ms add1(ms a, float v) { return merge(a, ms{v, 1.f}); }

/* A segment's end: the elements of [ga, gb) outside its aligned vectors [va, vb) (all of them
 * where it has none) into the thread's t, then the block's (max, sum). */
__device__ ms segment_tail(const float *x, long long ga, long long gb, long long va, long long vb, ms t) {
    if (va >= vb) { /* no vector: all scalar */
        for (long long e = ga + threadIdx.x; e < gb; e += BLOCK) t = add1(t, x[e]);
    } else {
        for (long long e = ga + threadIdx.x; e < 4 * va; e += BLOCK) t = add1(t, x[e]);
        for (long long e = 4 * vb + threadIdx.x; e < gb; e += BLOCK) t = add1(t, x[e]);
    }
    __shared__ ms w[BLOCK / 32];
#pragma unroll
    for (int o = 16; o; o >>= 1) t = merge(t, ms{__shfl_xor_sync(~0u, t.m, o), __shfl_xor_sync(~0u, t.s, o)});
    if ((threadIdx.x & 31) == 0) w[threadIdx.x / 32] = t;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < BLOCK / 32; i++) t = merge(t, w[i]);
        w[0] = t;
    }
    __syncthreads();
    return w[0];
}

/* The (max, sum) of elements [a, b) of row r, by this block. */
__device__ ms segment(const float *x, long long c, int r, long long a, long long b) {
    long long ga = (long long)r * c + a, gb = (long long)r * c + b;
    long long va = (ga + 3) / 4, vb = gb / 4; /* aligned vectors [va, vb) of the whole array (none: va >= vb) */
    ms t{NEG_INF, 0.f};
    const float4 *x4 = (const float4 *)x;
    long long v = va + threadIdx.x;
    for (; v + 7 * BLOCK < vb; v += 8 * BLOCK) {
        float4 q[8];
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = ld_cs(x4 + v + i * BLOCK);
#pragma unroll
        for (int i = 0; i < 8; i++) t = add4(t, q[i]);
    }
    for (; v < vb; v += BLOCK) t = add4(t, ld_cs(x4 + v));
    return segment_tail(x, ga, gb, va, vb, t);
}

/* As segment, but every round issues its eight loads masked (a lane past the segment loads
 * nothing), so that a segment of fewer than eight vectors a thread still has all of them in
 * flight at once. CHUNK=0 folds the vectors in one by one as they are consumed (a rescale a
 * vector); CHUNK=1 takes the round's max first and then every exponential against it, as xent's
 * chunks do, so that no exponential starts before the round's last load is in. */
__device__ ms segment_masked(const float *x, long long c, int r, long long a, long long b) {
    long long ga = (long long)r * c + a, gb = (long long)r * c + b;
    long long va = (ga + 3) / 4, vb = gb / 4; /* none where va >= vb: the loop below skips */
    ms t{NEG_INF, 0.f};
    const float4 *x4 = (const float4 *)x;
    const float4 none = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    for (long long v = va + threadIdx.x; v < vb; v += 8 * BLOCK) {
        float4 q[8];
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = v + i * BLOCK < vb ? ld_cs(x4 + v + i * BLOCK) : none;
#if CHUNK
        float m = t.m;
#pragma unroll
        for (int i = 0; i < 8; i++) m = fmaxf(fmaxf(fmaxf(m, q[i].x), fmaxf(q[i].y, q[i].z)), q[i].w);
        float s = t.s * __expf(t.m - m);
#pragma unroll
        for (int i = 0; i < 8; i++)
            s += __expf(q[i].x - m) + __expf(q[i].y - m) + __expf(q[i].z - m) + __expf(q[i].w - m);
        t = ms{m, s};
#else
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (v + i * BLOCK < vb) t = add4(t, q[i]);
#endif
    }
    return segment_tail(x, ga, gb, va, vb, t);
}

/* The last arrival: merge each row's P partials, the mean loss. */
__device__ void finish(const float *x, long long c, int n, const long long *tg, const float2 *parts, int P,
                       float *out) {
    if (threadIdx.x >= 32) return;
    float acc = 0.f;
    for (int r = 0; r < n; r++) {
        ms t{NEG_INF, 0.f};
        for (int i = threadIdx.x; i < P; i += 32) {
            float2 p = __ldcg(parts + (long long)r * P + i);
            t = merge(t, ms{p.x, p.y});
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) t = merge(t, ms{__shfl_xor_sync(~0u, t.m, o), __shfl_xor_sync(~0u, t.s, o)});
        acc += t.m + logf(t.s) - x[(long long)r * c + tg[r]];
    }
    if (threadIdx.x == 0) out[0] = acc / n;
}

__device__ __forceinline__ bool arrive_last(unsigned *ticket, unsigned total) {
    unsigned old;
    asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(ticket) : "memory");
    bool last = old == total - 1;
    if (last) *ticket = 0; /* ready for the next launch */
    return last;
}

/* Block b's segment: segment b % S of row b / S, the row cut into S near-equal parts. */
__device__ ms block_segment(const float *x, long long c, int S, bool masked = false) {
    int r = blockIdx.x / S, s = blockIdx.x % S;
    long long per = (c + S - 1) / S, a = s * per, b = min(c, a + per);
    return masked ? segment_masked(x, c, r, a, b) : segment(x, c, r, a, b);
}

/* The segments alone: each publishes its partial and leaves (no arrival, no loss): what the
 * read and the block's reduction cost before any combine. */
extern "C" __global__ void __launch_bounds__(BLOCK) publish(const float *x, long long c, int n, int S,
                                                           const long long *tg, float2 *parts, unsigned *ticket,
                                                           float *out) {
    ms t = block_segment(x, c, S);
    if (threadIdx.x == 0) parts[blockIdx.x] = make_float2(t.m, t.s);
}

/* publish over segment_masked (every round's loads in flight at once). */
extern "C" __global__ void __launch_bounds__(BLOCK) publish_masked(const float *x, long long c, int n, int S,
                                                                  const long long *tg, float2 *parts,
                                                                  unsigned *ticket, float *out) {
    ms t = block_segment(x, c, S, true);
    if (threadIdx.x == 0) parts[blockIdx.x] = make_float2(t.m, t.s);
}

extern "C" __global__ void __launch_bounds__(BLOCK) arrive(const float *x, long long c, int n, int S,
                                                          const long long *tg, float2 *parts, unsigned *ticket,
                                                          float *out) {
    ms t = block_segment(x, c, S);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_float2(t.m, t.s);
        last = arrive_last(ticket, gridDim.x);
    }
    __syncthreads();
    if (last) finish(x, c, n, tg, parts, S, out);
}

__device__ __forceinline__ unsigned cta_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float2 ld_remote(const float2 *p, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), ra;
    float2 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(ra) : "memory");
    return v;
}

extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(BLOCK)
cluster(const float *x, long long c, int n, int S, const long long *tg, float2 *parts, unsigned *ticket, float *out) {
    ms t = block_segment(x, c, S);
    __shared__ float2 mine;
    __shared__ bool last;
    if (threadIdx.x == 0) mine = make_float2(t.m, t.s);
    cl_sync();
    if (cta_rank() == 0 && threadIdx.x == 0) {
        ms u{NEG_INF, 0.f};
        for (unsigned k = 0; k < CL; k++) {
            float2 p = ld_remote(&mine, k);
            u = merge(u, ms{p.x, p.y});
        }
        parts[blockIdx.x / CL] = make_float2(u.m, u.s);
        last = arrive_last(ticket, gridDim.x / CL);
    }
    cl_sync(); /* no block leaves while rank 0 reads its shared memory */
    if (cta_rank() == 0) {
        __syncthreads();
        if (last) finish(x, c, n, tg, parts, S / CL, out);
    }
}
"""


def timeit(fn):
    """Median µs a launch: 5 rounds of 200 back to back (bench/_timing.py), after a first launch."""
    fn()
    return back_to_back_us(torch, fn, 200)


def loss_of_parts(parts, n, S, xt, tt):
    """The mean loss from the n * S (max, sum) partials a publish kernel left, merged by torch."""
    p = torch.as_tensor(parts.get()[: 2 * n * S].reshape(n, S, 2), dtype=torch.float64)
    m = p[..., 0].max(dim=1).values
    lse = m + torch.log((p[..., 1] * torch.exp(p[..., 0] - m[:, None])).sum(dim=1))
    return (lse.cuda() - xt.double().gather(1, tt[:, None])[:, 0]).mean().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--c", type=int, default=1000003)
    ap.add_argument("--segments", type=int, nargs="+", default=[16, 18, 19, 32, 37, 38, 64, 128])
    ap.add_argument("--cluster", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args()
    n, c = args.n, args.c
    torch.manual_seed(0)
    xt = torch.randn(n, c, device="cuda") * 3
    tt = torch.randint(0, c, (n,), device="cuda")
    want = torch.nn.functional.cross_entropy(xt.double(), tt).item()
    x = cp.asarray(xt)
    tg = cp.asarray(tt)
    out = cp.zeros(1, cp.float32)
    ticket = cp.zeros(1, cp.uint32)
    parts = cp.zeros(n * max(args.segments) * 2, cp.float32)  # float2 a segment
    sink = cp.zeros(1, cp.float32)
    nvec = n * c // 4
    floor_mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    rd = floor_mod.get_function("read_floor")
    blocks = (nvec + 2047) // 2048
    floor = timeit(lambda: rd((blocks,), (256,), (x, cp.int64(nvec), sink)))
    print("%dx%d fp32, %.1f MB; want %.6f" % (n, c, n * c * 4 / 1e6, want))
    print("read               %8.2f us" % floor)
    pub = floor_mod.get_function("publish")
    for S in args.segments:
        f = lambda: pub((n * S,), (256,), (x, cp.int64(c), cp.int32(n), cp.int32(S), tg, parts, ticket, out))
        med = timeit(f)
        print("publish S=%-4d     %8.2f us  x%.3f  (%d blocks; no combine)" %
              (S, med, med / floor, n * S))
    for chunk in (0, 1):
        pm = cp.RawModule(code=SRC, options=("-std=c++17", "-DCHUNK=%d" % chunk)).get_function("publish_masked")
        for S in args.segments:
            f = lambda: pm((n * S,), (256,), (x, cp.int64(c), cp.int32(n), cp.int32(S), tg, parts, ticket, out))
            med = timeit(f)
            got = loss_of_parts(parts, n, S, xt, tt)
            print("masked%s S=%-4d %8.2f us  x%.3f  loss %.6f %s" %
                  (" chunk" if chunk else " fold ", S, med, med / floor, got,
                   "ok" if abs(got - want) < 1e-4 * abs(want) else "WRONG"))
    ar = floor_mod.get_function("arrive")
    for S in args.segments:
        f = lambda: ar((n * S,), (256,), (x, cp.int64(c), cp.int32(n), cp.int32(S), tg, parts, ticket, out))
        med = timeit(f)
        got = float(out.get()[0])
        print("arrive  S=%-4d     %8.2f us  x%.3f  loss %.6f %s" %
              (S, med, med / floor, got, "ok" if abs(got - want) < 1e-4 * abs(want) else "WRONG"))
    for CL in args.cluster:
        mod = cp.RawModule(code=SRC, options=("-std=c++17", "-DCL=%d" % CL))
        cl = mod.get_function("cluster")
        for S in args.segments:
            if S % CL:
                continue
            f = lambda: cl((n * S,), (256,), (x, cp.int64(c), cp.int32(n), cp.int32(S), tg, parts, ticket, out))
            med = timeit(f)
            got = float(out.get()[0])
            print("cluster S=%-4d CL=%d %8.2f us  x%.3f  loss %.6f %s" %
                  (S, CL, med, med / floor, got, "ok" if abs(got - want) < 1e-4 * abs(want) else "WRONG"))


if __name__ == "__main__":
    main()
