/* shared/loads.cuh — the load instruction the CACHE knob picks (0 plain,
 * 1 read-only without L1 allocation, 2 streaming: evict first), the
 * targets' type, how a 16-bit logit widens and the max of packed 16-bit
 * pairs. Inlined where a template says #include "shared/loads.cuh" (tools/embed.sh). */
#if XENT_CACHE == 0
#define LD "ld.global"
#elif XENT_CACHE == 1
#define LD "ld.global.nc.L1::no_allocate"
#else
#define LD "ld.global.cs"
#endif

#if XENT_TARGET == 0
typedef int target_t;
#else
typedef long long target_t;
#endif

#if XENT_LOGIT != 0
/* A 16-bit logit (fp16 or bf16 bits) as fp32. */
__device__ __forceinline__ float widen16(unsigned short h) {
#if XENT_LOGIT == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return __uint_as_float(((unsigned)h) << 16);
#endif
}
#endif

#if XENT_LOGIT != 0 && __CUDA_ARCH__ >= 800
/* The max of two packed 16-bit pairs, pair by pair, as fmaxf treats NaN
 * (dropped); max.f16x2 and max.bf16x2 came with sm_80. */
__device__ __forceinline__ unsigned max_pair(unsigned a, unsigned b) {
    unsigned d;
#if XENT_LOGIT == 1
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
}
#endif
