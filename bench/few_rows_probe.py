#!/usr/bin/env python3
"""Few rows of a huge vocabulary: what reading a row in segments costs beside one read of the
logits, and what one level of arrivals adds (bench/ab/log.md, "Few rows").

Stand-alone kernels over the same n x c fp32 logits, 256-thread blocks, a block a segment of S
a row, each timed back to back in one process (CUDA events, the median of a few batches), each
result checked against float64 torch:
  read          the floor: every block reads 32 KB, eight 16-byte loads a thread, and stores
                one word only if a value is NaN, so that the loads are not dropped;
  publish       segments cut at elements (ceil(c / S) each), each publishing its (max, sum of
                exponentials) and leaving; vectors loaded eight a round while a round fills,
                then one at a time, then the scalars outside the aligned vectors;
  masked fold / masked chunk
                the same cut, every round's eight loads issued at once even where the segment
                holds fewer ("fold" folds each vector into the running (max, sum) as it is
                consumed, "chunk" takes the round's max first, as xent's chunks do);
  aligned       xent's cut: whole vectors a segment, the row's scalar ends loaded by its first
                and last segments with their first round, the target logit picked from the
                registers of the block that loaded it and published beside its partial;
  ticket        aligned, each block then counting its arrival on one counter, and the last
                merging nothing;
  arrive        aligned, then one level of arrivals: every block on one counter, the last
                merges every row (a warp a row, side by side) and writes the mean, as xent's
                one-level finish;
  cluster       arrive, with each cluster of CL blocks (__cluster_dims__) merging its segments
                in distributed shared memory first: S / CL arrivals a row.

    python3 bench/few_rows_probe.py [--n 7] [--c 1000003] [--segments 16 32 64] [--cluster 2 4 8]

arrive - aligned is what the combine costs (ticket - aligned its atomic, arrive - ticket the
last block's merge); aligned - masked chunk what the element cut's second round trip (its
scalars after its round) cost. Segment counts that are not powers of two
(18, 19, 37, 38 at n = 7: about one or two blocks an SM of 132) ask whether an even spread of
blocks over the SMs is worth what xent's powers of two leave uneven.
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
/* Five 256-thread blocks an SM at least (48 registers): left alone the aligned kernels took 52,
 * four blocks; at six they spill (ptxas -v, sm_90, CHUNK=1). The read takes 40 either way. */
#define MIN_BLOCKS 5
#define KERNEL extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float4 ld_cs(const float4 *p) {
    float4 v;
    asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
KERNEL read_floor(const float4 *x, long long nvec, float *sink) {
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

/* The warp's (max, sum) of its lanes' t, in every lane. */
__device__ __forceinline__ ms warp_merge(ms t) {
#pragma unroll
    for (int o = 16; o; o >>= 1) t = merge(t, ms{__shfl_xor_sync(~0u, t.m, o), __shfl_xor_sync(~0u, t.s, o)});
    return t;
}

/* The block's (max, sum) of its threads' t, in every thread. */
__device__ ms block_merge(ms t) {
    __shared__ ms w[BLOCK / 32];
    t = warp_merge(t);
    if ((threadIdx.x & 31) == 0) w[threadIdx.x / 32] = t;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < BLOCK / 32; i++) t = merge(t, w[i]);
        w[0] = t;
    }
    __syncthreads();
    return w[0];
}

/* A segment's end: the elements of [ga, gb) outside its aligned vectors [va, vb) (all of them
 * where it has none) into the thread's t, then the block's (max, sum). */
__device__ ms segment_tail(const float *x, long long ga, long long gb, long long va, long long vb, ms t) {
    if (va >= vb) { /* no vector: all scalar */
        for (long long e = ga + threadIdx.x; e < gb; e += BLOCK) t = add1(t, x[e]);
    } else {
        for (long long e = ga + threadIdx.x; e < 4 * va; e += BLOCK) t = add1(t, x[e]);
        for (long long e = 4 * vb + threadIdx.x; e < gb; e += BLOCK) t = add1(t, x[e]);
    }
    return block_merge(t);
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

/* This thread's vectors of [va, vb) into t, every round's eight loads issued at once (a lane
 * past vb loads nothing), so that a segment of fewer than eight vectors a thread still has all
 * of them in flight. CHUNK=0 folds the vectors in one by one as they are consumed (a rescale a
 * vector); CHUNK=1 takes the round's max first and then every exponential against it, as xent's
 * chunks do, so that no exponential starts before the round's last load is in. The thread that
 * loaded element gt (of the whole array; -1: none) keeps it in *xt, as xent's team picks the
 * target out of its registers. */
__device__ ms masked_vectors(const float *x, long long va, long long vb, ms t, long long gt, float *xt) {
    const float4 *x4 = (const float4 *)x;
    const float4 none = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    const long long tv = gt >= 0 && gt / 4 >= va && gt / 4 < vb ? gt / 4 : -1; /* the target's vector, if here */
    for (long long v = va + threadIdx.x; v < vb; v += 8 * BLOCK) {
        float4 q[8];
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = v + i * BLOCK < vb ? ld_cs(x4 + v + i * BLOCK) : none;
        const long long d = tv >= 0 ? tv - v : -1; /* past this thread's first vector of the round */
        /* One thread of the grid comes in. It selects the vector rather than indexing q: registers
         * cannot be indexed, and q[d / BLOCK] put the round in local memory. */
        if (d >= 0 && d < 8 * BLOCK) {
            const int e = (int)(gt % 4);
#pragma unroll
            for (int i = 0; i < 8; i++)
                if (d == i * BLOCK) *xt = e == 0 ? q[i].x : e == 1 ? q[i].y : e == 2 ? q[i].z : q[i].w;
        }
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
    return t;
}

/* As segment, with masked_vectors' rounds (the elements outside the aligned vectors still after them). */
__device__ ms segment_masked(const float *x, long long c, int r, long long a, long long b) {
    long long ga = (long long)r * c + a, gb = (long long)r * c + b;
    long long va = (ga + 3) / 4, vb = gb / 4; /* none where va >= vb: masked_vectors skips */
    float unused;
    ms t = masked_vectors(x, va, vb, ms{NEG_INF, 0.f}, -1, &unused);
    return segment_tail(x, ga, gb, va, vb, t);
}

/* xent's cut of row r into S segments: segment s holds whole aligned vectors of the row, ceil(nv /
 * S) of them, and the row's scalar ends (fewer than four elements each) go to its first and
 * last segments. Their threads load those ends before the vectors, so that no block waits
 * another round trip for them after its round (segment_tail's scalars come after it). The block
 * that holds the row's target element picks it from its registers: *xt, -inf elsewhere (c >= 8). */
__device__ ms segment_aligned(const float *x, long long c, int S, const long long *tg, float *xt) {
    int r = blockIdx.x / S, s = blockIdx.x % S;
    long long g0 = (long long)r * c, g1 = g0 + c, gt = g0 + tg[r];
    long long rva = (g0 + 3) / 4, rvb = g1 / 4, per = (rvb - rva + S - 1) / S;
    long long va = min(rva + s * per, rvb), vb = min(va + per, rvb);
    /* threads 0-3 the head [g0, 4 rva) of segment 0, threads 4-7 the tail [4 rvb, g1) of segment S - 1 */
    long long e = threadIdx.x < 4 ? g0 + threadIdx.x : 4 * rvb + threadIdx.x - 4;
    bool edge = threadIdx.x < 4 ? s == 0 && e < 4 * rva : threadIdx.x < 8 && s == S - 1 && e < g1;
    float ev = edge ? __ldcs(x + e) : NEG_INF;
    float mine = NEG_INF;
    ms t = masked_vectors(x, va, vb, ms{NEG_INF, 0.f}, gt, &mine);
    if (edge && e == gt) mine = ev;
    t = add1(t, ev); /* -inf adds nothing */
    __shared__ float picked;
    if (threadIdx.x == 0) picked = NEG_INF;
    __syncthreads();
    if (mine != NEG_INF) picked = mine; /* one thread of the grid loads the target */
    t = block_merge(t); /* its barriers order the pick before the read below */
    *xt = picked;
    return t;
}

/* The last arrival: a warp a row merges its P <= 128 partials (a lane each, all loaded at once),
 * the rows side by side as xent's finish merges them, then the mean in row order. */
__device__ void finish(const float4 *parts, int n, int P, float *out) {
    __shared__ float row_loss[BLOCK / 32];
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    float acc = 0.f;
    for (int r0 = 0; r0 < n; r0 += BLOCK / 32) {
        const int r = r0 + w;
        float4 p[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = lane + 32 * q;
            p[q] = r < n && i < P ? __ldcg(parts + (long long)r * P + i) : make_float4(NEG_INF, 0.f, NEG_INF, 0.f);
        }
        ms t{NEG_INF, 0.f};
        float xt = NEG_INF;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            t = merge(t, ms{p[q].x, p[q].y});
            xt = fmaxf(xt, p[q].z);
        }
        t = warp_merge(t);
#pragma unroll
        for (int o = 16; o; o >>= 1) xt = fmaxf(xt, __shfl_xor_sync(~0u, xt, o));
        if (lane == 0) row_loss[w] = t.m + logf(t.s) - xt;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < BLOCK / 32 && r0 + i < n; i++) acc += row_loss[i];
        __syncthreads();
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
KERNEL publish(const float *x, long long c, int n, int S, const long long *tg, float2 *parts,
               unsigned *ticket, float *out) {
    ms t = block_segment(x, c, S);
    if (threadIdx.x == 0) parts[blockIdx.x] = make_float2(t.m, t.s);
}

/* publish over segment_masked (every round's loads in flight at once). */
KERNEL publish_masked(const float *x, long long c, int n, int S, const long long *tg, float2 *parts,
                      unsigned *ticket, float *out) {
    ms t = block_segment(x, c, S, true);
    if (threadIdx.x == 0) parts[blockIdx.x] = make_float2(t.m, t.s);
}

/* The segments in xent's cut, each publishing (max, sum, its target logit or -inf) and leaving. */
KERNEL publish_aligned(const float *x, long long c, int n, int S, const long long *tg, float4 *parts,
                       unsigned *ticket, float *out) {
    float xt;
    ms t = segment_aligned(x, c, S, tg, &xt);
    if (threadIdx.x == 0) parts[blockIdx.x] = make_float4(t.m, t.s, xt, 0.f);
}

/* publish_aligned, then one level of arrivals: every segment on one counter, the last block
 * finishes every row and the mean (as xent's one-level finish). */
KERNEL arrive(const float *x, long long c, int n, int S, const long long *tg, float4 *parts, unsigned *ticket,
              float *out) {
    float xt;
    ms t = segment_aligned(x, c, S, tg, &xt);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_float4(t.m, t.s, xt, 0.f);
        last = arrive_last(ticket, gridDim.x);
    }
    __syncthreads();
    if (last) finish(parts, n, S, out);
}

/* publish_aligned and the arrival alone: every block counts itself on the one counter and the
 * last merges nothing, so that arrive - ticket is the finish's pass and ticket - aligned the
 * atomic's round trip. */
KERNEL ticket_only(const float *x, long long c, int n, int S, const long long *tg, float4 *parts,
                   unsigned *ticket, float *out) {
    float xt;
    ms t = segment_aligned(x, c, S, tg, &xt);
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = make_float4(t.m, t.s, xt, 0.f);
        if (arrive_last(ticket, gridDim.x)) out[0] = 0.f;
    }
}

__device__ __forceinline__ unsigned cta_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cl_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float4 ld_remote(const float4 *p, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(ra) : "memory");
    return v;
}

/* arrive, with the segments of a cluster of CL blocks merged in distributed shared memory
 * first: only the cluster's first block publishes and arrives, S / CL arrivals a row. */
extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(BLOCK, MIN_BLOCKS)
cluster(const float *x, long long c, int n, int S, const long long *tg, float4 *parts, unsigned *ticket, float *out) {
    float xt;
    ms t = segment_aligned(x, c, S, tg, &xt);
    __shared__ float4 mine;
    __shared__ bool last;
    if (threadIdx.x == 0) mine = make_float4(t.m, t.s, xt, 0.f);
    cl_sync();
    if (cta_rank() == 0 && threadIdx.x == 0) {
        ms u{NEG_INF, 0.f};
        float ut = NEG_INF;
        for (unsigned k = 0; k < CL; k++) {
            float4 p = ld_remote(&mine, k);
            u = merge(u, ms{p.x, p.y});
            ut = fmaxf(ut, p.z);
        }
        parts[blockIdx.x / CL] = make_float4(u.m, u.s, ut, 0.f);
        last = arrive_last(ticket, gridDim.x / CL);
    }
    cl_sync(); /* no block leaves while rank 0 reads its shared memory */
    if (cta_rank() == 0) {
        __syncthreads();
        if (last) finish(parts, n, S / CL, out);
    }
}
"""


def timeit(fn):
    """Median µs a launch: 5 rounds of 200 back to back (bench/_timing.py), after a first launch."""
    fn()
    return back_to_back_us(torch, fn, 200)


def loss_of_parts(parts, n, S, width, xt, tt):
    """The mean loss from the n * S partials a publish kernel left, merged by torch in float64: (max,
    sum) pairs with torch's target logits (width 2), or with the target logit each row's segments
    published, -inf but in one (width 4)."""
    p = torch.as_tensor(parts.get()[: width * n * S].reshape(n, S, width), dtype=torch.float64)
    m = p[..., 0].max(dim=1).values
    lse = m + torch.log((p[..., 1] * torch.exp(p[..., 0] - m[:, None])).sum(dim=1))
    target = p[..., 2].max(dim=1).values if width == 4 else xt.double().gather(1, tt[:, None])[:, 0].cpu()
    return (lse - target).mean().item()


# The kernels timed, in order: (label, kernel, defines, blocks a cluster, result). The result is the
# kernel's own mean loss ("out"), or the partials it published merged by torch (loss_of_parts): (max,
# sum) pairs with torch's target logits ("pairs"), or beside the target logit it picked ("picked").
FORMS = [
    ("publish", "publish", (), 1, "pairs"),
    ("masked fold", "publish_masked", ("-DCHUNK=0",), 1, "pairs"),
    ("masked chunk", "publish_masked", ("-DCHUNK=1",), 1, "pairs"),
    ("aligned", "publish_aligned", ("-DCHUNK=1",), 1, "picked"),
    ("ticket", "ticket_only", ("-DCHUNK=1",), 1, "picked"),
    ("arrive", "arrive", ("-DCHUNK=1",), 1, "out"),
]
FINISH_MAX = 128  # partials a row the finish merges (four a lane)
OPTIONS = ("-std=c++17",)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--c", type=int, default=1000003)
    ap.add_argument("--segments", type=int, nargs="+", default=[16, 18, 19, 32, 37, 38, 64, 128])
    ap.add_argument("--cluster", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args()
    n, c = args.n, args.c
    if c < 8:
        ap.error("--c must be 8 or more: the aligned cut gives a row's ends to its first and last segments")
    torch.manual_seed(0)
    xt = torch.randn(n, c, device="cuda") * 3
    tt = torch.randint(0, c, (n,), device="cuda")
    want = torch.nn.functional.cross_entropy(xt.double(), tt).item()
    x = cp.asarray(xt)
    tg = cp.asarray(tt)
    out = cp.zeros(1, cp.float32)
    ticket = cp.zeros(1, cp.uint32)
    parts = cp.zeros(n * max(args.segments) * 4, cp.float32)  # up to float4 a segment
    sink = cp.zeros(1, cp.float32)
    nvec = n * c // 4
    rd = cp.RawModule(code=SRC, options=OPTIONS).get_function("read_floor")
    blocks = (nvec + 2047) // 2048
    floor = timeit(lambda: rd((blocks,), (256,), (x, cp.int64(nvec), sink)))
    print("%dx%d fp32, %.1f MB; want %.6f" % (n, c, n * c * 4 / 1e6, want))
    print("read                    %8.2f us" % floor)
    forms = FORMS + [("cluster CL=%d" % k, "cluster", ("-DCHUNK=1", "-DCL=%d" % k), k, "out") for k in args.cluster]
    for label, kernel, defines, cl, result in forms:
        fn = cp.RawModule(code=SRC, options=OPTIONS + defines).get_function(kernel)
        for S in args.segments:
            if S % cl or (result == "out" and S // cl > FINISH_MAX):
                continue
            f = lambda: fn((n * S,), (256,), (x, cp.int64(c), cp.int32(n), cp.int32(S), tg, parts, ticket, out))
            med = timeit(f)
            if result == "out":
                got = float(out.get()[0])
            else:
                got = loss_of_parts(parts, n, S, 4 if result == "picked" else 2, xt, tt)
            print("%-14s S=%-4d %8.2f us  x%.3f  loss %.6f %s" %
                  (label, S, med, med / floor, got, "ok" if abs(got - want) < 1e-4 * abs(want) else "WRONG"))


if __name__ == "__main__":
    main()
